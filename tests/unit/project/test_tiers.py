"""The test tiers (tests/conftest.py, docs/testing.md): disjoint markers, each registered, the fast
tier as the default run, a named file run whole, ``.ci/run`` running every tier after the README's
test command, and a stale entry of the slow list failing a whole-suite run."""

from __future__ import annotations

import re
import subprocess
import sys
import tomllib
from pathlib import Path
from types import SimpleNamespace

import pytest

from tests import conftest

ROOT = Path(__file__).resolve().parents[3]
README_TEST_COMMAND = "pip install -e '.[test]' && pytest -q"


def test_every_tier_is_a_registered_marker() -> None:
    markers = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["pytest"]["ini_options"]["markers"]
    names = {m.split(":", 1)[0] for m in markers}
    assert set(conftest.TIERS) <= names


def test_ci_runs_the_readme_command_then_every_tier() -> None:
    script = (ROOT / ".ci/run").read_text()
    assert README_TEST_COMMAND in (ROOT / "README.md").read_text()
    start = script.index(README_TEST_COMMAND)
    for tier in conftest.TIERS:
        found = re.search(rf"^\s*tier {tier}\b", script[start:], re.MULTILINE)
        assert found is not None, f".ci/run does not run the {tier} tier after the README's command"


def _collect(*args: str) -> str:
    proc = subprocess.run(
        [sys.executable, "-m", "pytest", "--collect-only", "-q", "-p", "no:cacheprovider", *args],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    return proc.stdout.strip().splitlines()[-1]


def test_a_named_file_runs_whole_a_folder_keeps_the_fast_tier() -> None:
    chaos_file = "tests/integration/chaos/test_chaos.py"
    assert _collect(chaos_file).startswith("1 test collected")
    assert _collect(str(Path(chaos_file).parent)).startswith("no tests collected")  # chaos + slow only


def test_a_slow_entry_that_matches_nothing_fails_a_whole_suite_run() -> None:
    def config(source: object) -> SimpleNamespace:
        return SimpleNamespace(args_source=source, option=SimpleNamespace(keyword="", markexpr="x"), args=[])

    with pytest.raises(pytest.UsageError, match="SLOW names tests that do not exist"):
        conftest.pytest_collection_modifyitems(config(pytest.Config.ArgsSource.TESTPATHS), [])  # type: ignore[arg-type]
    conftest.pytest_collection_modifyitems(config(pytest.Config.ArgsSource.ARGS), [])  # type: ignore[arg-type]
