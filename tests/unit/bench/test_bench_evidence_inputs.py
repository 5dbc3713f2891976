"""The evidence commands (``python -m smetric.bench.evidence.<module>``): a missing, malformed or
wrong input and an unwritable output are one line on stderr and exit status 2, before any run."""

from __future__ import annotations

import importlib
from collections.abc import Callable, Sequence
from pathlib import Path

import pytest

from smetric.bench.evidence.inputs import command

READERS = ("default_policy", "drift_check", "knee", "pieces", "overload_table")


def _inputs(tmp: Path) -> dict[str, tuple[Path, str]]:
    (tmp / "bad.json").write_text("{bad\n")
    (tmp / "other.json").write_text('{"a": 1}\n')
    (tmp / "rows.json").write_text('{"config": {"measure_s": 60}, "summary": [], "results": [{"x": 1}]}\n')
    return {
        "malformed": (tmp / "bad.json", "not valid JSON"),
        "missing": (tmp / "missing.json", "cannot read it (No such file or directory)"),
        "another document": (tmp / "other.json", "not a `smetric simulate"),
        "rows without their keys": (tmp / "rows.json", "has no 'policy', 'rate_multiplier', 'seed'"),
    }


def _run(name: str, argv: list[str]) -> int:
    mod = importlib.import_module(f"smetric.bench.evidence.{name}")
    main: Callable[[Sequence[str] | None], int] = mod.main
    return command(main, argv, f"python -m smetric.bench.evidence.{name}")


@pytest.mark.parametrize("name", READERS)
@pytest.mark.parametrize("case", ["malformed", "missing", "another document", "rows without their keys"])
def test_a_bad_input_is_one_line(
    name: str, case: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    if name == "default_policy" and case == "rows without their keys":
        pytest.skip("a regime map has no result rows")
    path, says = _inputs(tmp_path)[case]
    assert _run(name, [str(path)]) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    assert err.startswith(f"python -m smetric.bench.evidence.{name}: {path}") and says in err, err


def test_merge_checks_its_output_before_reading(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    bad = _inputs(tmp_path)["malformed"][0]
    assert _run("merge", [str(bad), str(bad), "/proc/x/out.json"]) == 2
    assert capsys.readouterr().err == (
        "python -m smetric.bench.evidence.merge: out /proc/x/out.json: cannot write there (No such file or directory)\n"
    )
    assert _run("merge", [str(bad), str(bad), str(tmp_path / "out.json")]) == 2
    assert "not valid JSON" in capsys.readouterr().err


@pytest.mark.parametrize("name", ["estimates_ablation", "tiered_ablation"])
def test_ablations_check_the_trace_and_the_output_before_any_run(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    mod = importlib.import_module(f"smetric.bench.evidence.{name}")
    monkeypatch.setattr(mod, "process_pool", lambda *_: pytest.fail("a run started"))
    bad = tmp_path / "bad.jsonl"
    bad.write_text("{bad\n")
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    prog = f"python -m smetric.bench.evidence.{name}"
    for argv, says in (
        (["--trace", str(bad)], f"{prog}: --trace {bad}:1: "),
        (["--trace", str(tmp_path / "none.jsonl")], f"{prog}: --trace {tmp_path / 'none.jsonl'}: not found"),
        (["--trace", str(empty)], f"{prog}: --trace {empty}: no request in it"),
        (
            ["--trace", str(bad), "--json", "/proc/x/y.json"],
            f"{prog}: --json /proc/x/y.json: cannot write there",
        ),
    ):
        assert _run(name, argv) == 2
        err = capsys.readouterr().err
        assert err.startswith(says) and err.count("\n") == 1, err


@pytest.mark.parametrize("name", ["drift_check", "knee", "pieces"])
def test_a_bad_or_missing_sidecar_is_one_line(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The committed results are ``.runs.jsonl.gz`` sidecars: one that is not gzip, not a sidecar or
    missing is one line naming the file, not a traceback."""
    (tmp_path / "bad.runs.jsonl.gz").write_text("not gzip\n")
    (tmp_path / "other.runs.jsonl").write_text('{"a": 1}\n')
    for path, says in (
        (tmp_path / "bad.runs.jsonl.gz", "not a sweep sidecar (not gzip of UTF-8 text)"),
        (tmp_path / "other.runs.jsonl", "not a sweep sidecar"),
        (tmp_path / "missing.runs.jsonl.gz", "cannot read it (No such file or directory)"),
    ):
        assert _run(name, [str(path)]) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith(f"python -m smetric.bench.evidence.{name}: {path}") and says in err, err
