"""``smetric chaos`` command line: listing the guards needs no output file; a run does."""

from __future__ import annotations

from pathlib import Path

import pytest

from smetric.bench.chaos import cli as chaos
from smetric.bench.chaos.cli import GUARDS, main
from smetric.bench.chaos.faults import Row
from smetric.bench.chaos.guards import NO_GUARD


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


def test_an_unwritable_json_is_one_line_before_the_stack_starts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def never(*_: object, **__: object) -> None:
        raise AssertionError("the stack started")

    monkeypatch.setattr(chaos, "run", never)
    (tmp_path / "file").write_text("")
    assert main(["--quick", "--json", str(tmp_path / "file" / "x.json")]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"smetric chaos: --json {tmp_path / 'file' / 'x.json'}: cannot write there")
    assert err.count("\n") == 1


def test_the_table_is_printed_before_the_json_is_written(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A write that fails after the run (the disk filled, the folder went) loses no result."""

    async def quick_run(*_: object, **__: object) -> tuple[list[Row], dict[str, float]]:
        return [Row("a fault", "survives", "it survived", True, NO_GUARD)], {}

    monkeypatch.setattr(chaos, "run", quick_run)
    monkeypatch.setattr(chaos, "check_writable", lambda *_: None)  # the path breaks after the check
    (tmp_path / "file").write_text("")
    assert main(["--quick", "--json", str(tmp_path / "file" / "x.json")]) == 2
    got = capsys.readouterr()
    assert "| a fault | - | survives | it survived | yes |" in got.out
    assert got.err.startswith("smetric chaos: --json") and got.err.count("\n") == 1


@pytest.mark.parametrize("kind", ["under /proc", "a file"])
def test_an_unusable_work_dir_is_one_line_naming_the_flag(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    async def never(*_: object, **__: object) -> None:
        raise AssertionError("the stack started")

    monkeypatch.setattr(chaos, "run", never)
    (tmp_path / "file").write_text("")
    work = "/proc/x/w" if kind == "under /proc" else str(tmp_path / "file")
    assert main(["--quick", "--json", str(tmp_path / "x.json"), "--work-dir", work]) == 2
    err = capsys.readouterr().err
    assert (
        err.startswith(f"smetric chaos: --work-dir {work}: cannot make the folder (") and err.count("\n") == 1
    ), err
