"""The sweep sidecar (smetric.sim.stream): one writer at a time, and a reader that drops only a torn
last line. Two sweeps once wrote one sidecar; the reader skipped the line they had merged, so two
runs vanished and a published peak moved by two points without a word."""

from __future__ import annotations

import errno
import json
from pathlib import Path

import pytest

from smetric.sim import stream
from smetric.sim.cli import main
from smetric.sim.stream import FORMAT, Sidecar, read_rows, sidecar_path
from smetric.sim.sweep import RunCost, RunKey
from tests.unit.sim.test_sim_sweep import tiny

COST = RunCost(1.0, 1.0)


def _line(policy: str, seed: int) -> str:
    return json.dumps({"key": ["", policy, seed, 3.0], "row": {"policy": policy, "seed": seed}})


def _write(path: Path, lines: list[str]) -> None:
    head = json.dumps({"format": FORMAT, "fingerprint": "f"})
    path.write_text("\n".join([head, *lines]) + "\n")


def test_only_the_last_line_may_be_torn(tmp_path: Path) -> None:
    side = tmp_path / "x.runs.jsonl"
    _write(side, [_line("a", 0), _line("a", 1)[:-1] + "{" + _line("a", 2), _line("a", 3)])
    with pytest.raises(ValueError, match="line 3 is not a finished run"):
        read_rows(side)
    _write(side, [_line("a", 0), _line("a", 1), _line("a", 2)[:25]])  # an interrupted sweep
    assert [k.seed for k in read_rows(side)[1]] == [0, 1]


def test_a_header_further_down_is_two_sidecars_concatenated(tmp_path: Path) -> None:
    side = tmp_path / "x.runs.jsonl"
    head = json.dumps({"format": FORMAT, "fingerprint": "g"})
    _write(side, [_line("a", 0), head, _line("a", 1)])
    assert [k.seed for k in read_rows(side)[1]] == [0, 1]
    _write(side, [_line("a", 0), json.dumps({"key": ["", "a", 1, 3.0]}), _line("a", 2)])  # no row
    with pytest.raises(ValueError, match="line 3"):
        read_rows(side)


def test_one_sweep_writes_a_sidecar_at_a_time(tmp_path: Path) -> None:
    side = tmp_path / "x.runs.jsonl"
    first = Sidecar(side, "f", resume=False)
    first.add(RunKey("", "a", 0, 3.0), {"policy": "a"}, COST)
    with pytest.raises(ValueError, match="another sweep is writing it"):
        Sidecar(side, "f", resume=False)  # would truncate the first one's rows
    with pytest.raises(ValueError, match="another sweep is writing it"):
        Sidecar(side, "f", resume=True)
    first.add(RunKey("", "a", 1, 3.0), {"policy": "a"}, COST)
    first.close()
    assert [k.seed for k in read_rows(side)[1]] == [0, 1]
    again = Sidecar(side, "f", resume=True)  # the lock ends with the writer
    assert [k.seed for k in again.done] == [0, 1]
    again.close()


def test_the_cli_refuses_a_json_another_sweep_is_writing(tmp_path: Path) -> None:
    out = tmp_path / "a.json"
    args = [*tiny(tmp_path), "--seeds", "0", "--rates", "1", "--no-extend-past-knee", "--workers", "1"]
    holder = Sidecar(sidecar_path(out), "f", resume=False)
    try:
        assert main([*args, "--json", str(out)]) == 2
        assert not out.exists()
    finally:
        holder.close()
    assert main([*args, "--json", str(out)]) == 0


def test_a_filesystem_without_locks_still_takes_the_sweep(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    def no_locks(fd: int, op: int) -> None:
        raise OSError(errno.ENOLCK, "No locks available")

    monkeypatch.setattr(stream.fcntl, "flock", no_locks)
    side = tmp_path / "x.runs.jsonl"
    writer = Sidecar(side, "f", resume=False)  # not "another sweep is writing it"
    writer.add(RunKey("", "a", 0, 3.0), {"policy": "a"}, COST)
    writer.close()
    assert [k.seed for k in read_rows(side)[1]] == [0]
