"""Every command's usage error (an unknown flag, a missing required argument) is one line on
stderr that points at ``--help``, exit status 2: argparse's default prints the whole usage first
(21 lines for ``smetric bench``)."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence

import pytest

COMMANDS = {
    "smetric bench": "smetric.bench.cli",
    "smetric serve": "smetric.bench.serve",
    "smetric chaos": "smetric.bench.chaos.cli",
    "smetric simulate": "smetric.sim.cli",
    "smetric trace": "smetric.trace.cli",
    "smetric emulate": "smetric.emulator.cli",
    "smetric-epp": "smetric.epp.main",
    "python -m smetric.bench.differential_run": "smetric.bench.differential_run",
}


@pytest.mark.parametrize("prog", sorted(COMMANDS))
def test_an_unknown_flag_is_one_line(prog: str, capsys: pytest.CaptureFixture[str]) -> None:
    main: Callable[[Sequence[str] | None], int] = importlib.import_module(COMMANDS[prog]).main
    try:
        code = main(["--no-such-flag"])
    except SystemExit as exc:
        code = exc.code  # type: ignore[assignment]
    err = capsys.readouterr().err
    assert code == 2
    assert err.count("\n") == 1 and err.startswith(f"{prog}") and f"(see {prog}" in err, err
