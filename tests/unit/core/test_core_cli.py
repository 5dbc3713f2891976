"""The umbrella CLI finds its subcommands through the ``smetric.commands`` entry points."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from smetric.core import cli

ROOT = Path(__file__).resolve().parents[3]


def test_every_subsystem_command_is_registered() -> None:
    assert {"simulate", "trace", "emulate", "bench", "chaos", "epp"} <= set(cli.commands())


def test_every_command_in_pyproject_names_a_main() -> None:
    """The entry points as written (an install registers them: ``pip install -e .``), each a
    module with a ``main`` and a docstring summary for ``smetric --help``."""
    import importlib
    import tomllib

    table = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["entry-points"][cli.GROUP]
    assert {"simulate", "trace", "emulate", "bench", "chaos", "serve", "epp"} <= set(table)
    for name, target in table.items():
        module, _, func = target.partition(":")
        assert func == "main" and callable(importlib.import_module(module).main), name


def test_the_core_cli_imports_no_subsystem() -> None:
    tree = ast.parse((ROOT / "core/smetric/core/cli.py").read_text())
    names = [a.name for n in ast.walk(tree) if isinstance(n, ast.Import) for a in n.names]
    names += [n.module or "" for n in ast.walk(tree) if isinstance(n, ast.ImportFrom)]
    assert not [m for m in names if m.startswith("smetric")]


def test_help_lists_each_command_with_its_summary(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["--help"]) == 0
    out = capsys.readouterr().out
    assert "simulate   trace-driven simulation of routing policies" in out
    assert "epp        run the endpoint picker" in out


def test_unknown_command_and_no_command_exit_2(capsys: pytest.CaptureFixture[str]) -> None:
    assert cli.main(["nope"]) == 2
    assert "unknown command 'nope'" in capsys.readouterr().err
    assert cli.main([]) == 2


def test_dispatch_runs_the_commands_main(capsys: pytest.CaptureFixture[str]) -> None:
    try:
        rc = cli.main(["trace", "--help"])
    except SystemExit as exc:  # argparse's --help
        rc = int(exc.code or 0)
    assert rc == 0
    assert "stats" in capsys.readouterr().out


def test_help_shows_every_summary_whole() -> None:
    """A long summary wraps under its command instead of being cut off."""
    from smetric.core.cli import _usage, commands, summary

    text = " ".join(_usage(commands()).split())
    for ep in commands().values():
        assert summary(ep) in text and "..." not in summary(ep)
