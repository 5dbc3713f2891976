"""``smetric chaos`` command line: listing the guards needs no output file; a run does."""

from __future__ import annotations

import pytest

from smetric.bench.chaos import GUARDS, main


def test_list_guards_needs_no_json(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["--list-guards"]) == 0
    lines = capsys.readouterr().out.splitlines()
    assert len(lines) == len(GUARDS) and all(
        line.startswith(g.name + ":") for line, g in zip(lines, GUARDS, strict=True)
    )


def test_a_run_needs_json() -> None:
    with pytest.raises(SystemExit) as exc:
        main([])
    assert exc.value.code == 2
