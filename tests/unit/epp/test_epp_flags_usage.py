"""``smetric-epp``'s usage: a mistyped flag is one line (exit 2), and each default is shown once."""

from __future__ import annotations

import pytest

from smetric.core.pickerflags import build_parser


def test_a_mistyped_flag_is_one_line_with_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit) as exc:
        build_parser().parse_args(["--pool-nmae", "x"])
    assert exc.value.code == 2
    err = capsys.readouterr().err
    assert err.strip().splitlines() == [
        "smetric-epp: error: unrecognized arguments: --pool-nmae x (see smetric-epp --help)"
    ]


def test_help_states_each_default_once() -> None:
    text = " ".join(build_parser().format_help().split())
    assert "InferencePool namespace (default: $NAMESPACE, else default)" in text
    assert "else default) (default:" not in text
    assert text.count("(default:") >= 10  # flags that do not state their default still get one
