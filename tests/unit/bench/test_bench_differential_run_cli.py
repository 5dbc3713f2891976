"""``python -m smetric.bench.differential_run``: a bad trace, folder, reused run or output is one
line on stderr and exit status 2, before the bench starts."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from smetric.bench import differential_run as dr

PROG = "python -m smetric.bench.differential_run: "


@pytest.fixture
def no_bench(monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.setattr(dr, "run_bench", lambda *a, **k: pytest.fail("the bench was started"))


def _err(capsys: pytest.CaptureFixture[str]) -> str:
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "Traceback" not in err, err
    return err


def test_bad_trace_missing_trace_and_empty_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_bench: None
) -> None:
    bad, empty = tmp_path / "bad.jsonl", tmp_path / "empty.jsonl"
    bad.write_text("{bad\n")
    empty.write_text("")
    common = ["--bench-dir", str(tmp_path / "d"), "--json", str(tmp_path / "d.json")]
    assert dr.main(["--trace", str(bad), *common]) == 2
    assert _err(capsys).startswith(f"{PROG}trace {bad}:1: ")
    assert dr.main(["--trace", str(tmp_path / "none.jsonl"), *common]) == 2
    assert _err(capsys) == f"{PROG}trace {tmp_path / 'none.jsonl'} not found\n"
    assert dr.main(["--trace", str(empty), *common]) == 2
    assert _err(capsys).startswith(f"{PROG}trace {empty}: no request to replay")


def test_outputs_are_checked_before_the_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_bench: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dr, "find_trace", lambda _: pytest.fail("the trace was looked for"))
    assert dr.main(["--bench-dir", str(tmp_path / "d"), "--json", "/proc/x/y.json"]) == 2
    assert _err(capsys) == f"{PROG}--json /proc/x/y.json: cannot write there (No such file or directory)\n"
    assert dr.main(["--bench-dir", "/proc/x/d", "--json", str(tmp_path / "d.json")]) == 2
    assert (
        _err(capsys) == f"{PROG}--bench-dir /proc/x/d: cannot make the folder (No such file or directory)\n"
    )


def test_a_reused_run_that_is_missing_or_malformed(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], no_bench: None, monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dr, "load_trace", lambda *a: None)
    trace = tmp_path / "t.jsonl"
    trace.write_text("")
    d = tmp_path / "d"
    argv = ["--reuse", "--trace", str(trace), "--bench-dir", str(d), "--json", str(tmp_path / "d.json")]
    assert dr.main(argv) == 2
    assert _err(capsys).startswith(f"{PROG}{d / 'bench.json'}: cannot read it (No such file or directory)")
    (d / "bench.json").write_text("{bad")
    assert dr.main(argv) == 2
    assert _err(capsys).startswith(f"{PROG}{d / 'bench.json'}: not valid JSON")
    (d / "bench.json").write_text('{"a": 1}')
    assert dr.main(argv) == 2
    assert "not a smetric bench --json output" in _err(capsys)


def test_a_failed_bench_is_one_line(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.setattr(dr, "run_child", lambda cmd, timeout_s, grace_s: 2)
    with pytest.raises(
        dr.BenchError, match=r"smetric bench ended with status 2 \(its own message is above\)"
    ):
        dr.run_bench(tmp_path, ["lmetric"], 0.01, 0, tmp_path / "t.jsonl")


CHILD = (
    "import signal, sys, time, pathlib\n"
    "def term(*_):\n"
    "    pathlib.Path(sys.argv[1]).write_text('stopped its own processes')\n"
    "    sys.exit(0)\n"
    "signal.signal(signal.SIGTERM, term)\n"
    "print('ready', flush=True)\n"
    "time.sleep(60)\n"
)


def test_a_bench_past_its_timeout_gets_sigterm_to_stop_what_it_started(tmp_path: Path) -> None:
    """The bench stops its engines, picker and Envoy on SIGTERM; a SIGKILL (what
    ``subprocess.run(timeout=)`` sends) would leave them running in their own process groups.
    Guard off (``_stop`` kills at once): the marker is never written."""
    from smetric.bench.procs import run_child

    marker = tmp_path / "marker"
    script = tmp_path / "child.py"
    script.write_text(CHILD)
    assert run_child([sys.executable, str(script), str(marker)], timeout_s=1.5, grace_s=10.0) is None
    assert marker.read_text() == "stopped its own processes"
    assert run_child([sys.executable, "-c", "raise SystemExit(3)"], timeout_s=10.0, grace_s=1.0) == 3
