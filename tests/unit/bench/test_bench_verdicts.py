"""What ``smetric bench`` prints after its table: a paired verdict per row and rate, and up-front
failures (one line, exit 2, no work) for outputs it could not write and for unknown arguments."""

from __future__ import annotations

import subprocess
import sys
from pathlib import Path

import pytest

from smetric.bench.rowreport import summary_markdown, verdict, verdict_lines
from smetric.bench.sweep import Cell, rows_of
from tests.support.bench_results import result


def _rows(ref: list[float], other: list[float]) -> list:  # type: ignore[type-arg]
    cells = [Cell(1.0, k, result("a", t, 0.9)) for k, t in enumerate(ref)]
    cells += [Cell(1.0, k, result("b", t, 0.9)) for k, t in enumerate(other)]
    return rows_of(cells, ["a", "b"], 1.0, None)


@pytest.mark.parametrize(
    ("other", "word"),
    [
        ([15.0, 16.0, 15.5], "b is better than a"),
        ([5.0, 6.0, 5.5], "b is worse than a"),
        ([13.0, 7.0, 10.2], "no significant difference between b and a"),
    ],
)
def test_verdict_follows_the_paired_interval(other: list[float], word: str) -> None:
    rows = _rows([10.0, 10.0, 10.0], other)
    line = verdict(rows[1])
    assert line.startswith(word), line
    assert "95 % CI" in line and "3 paired seeds" in line
    assert verdict(rows[0]) == ""  # the reference row has no pair


def test_one_seed_gets_no_verdict() -> None:
    rows = _rows([10.0], [12.0])
    assert "one seed: no interval, no verdict" in verdict(rows[1])


def test_verdict_lines_name_the_best_row_per_rate_and_markdown_explains_not_sent() -> None:
    rows = _rows([10.0, 11.0], [20.0, 21.0])
    lines = verdict_lines(rows)
    assert lines[0].startswith("rate 1 (knee): highest mean TPS in SLO: b")
    md = summary_markdown(rows)
    assert "- b is better than a" in md and "not sent: each session is a closed loop" in md


def _bench(*args: str) -> tuple[int, str]:
    p = subprocess.run(
        [sys.executable, "-m", "smetric.core.cli", "bench", *args], capture_output=True, text=True, timeout=60
    )
    return p.returncode, p.stdout + p.stderr


@pytest.mark.parametrize(
    ("args", "needle"),
    [
        (["--quick", "--json", "/proc/nope/b.json"], "--json /proc/nope/b.json: cannot write there"),
        (["--quick", "--json", "{tmp}/b.json", "--plot", "/proc/nope/b.png"], "--plot /proc/nope/b.png"),
        (["--quick", "--json", "{tmp}/b.json", "--plot", "{tmp}/b.pdf"], "the figure is a PNG"),
        (["--quick", "--json", "{tmp}/b.json", "--peer", "nginx"], "unknown peer router 'nginx'"),
    ],
)
def test_bad_outputs_and_arguments_fail_up_front(tmp_path: Path, args: list[str], needle: str) -> None:
    rc, out = _bench(*(a.replace("{tmp}", str(tmp_path)) for a in args))
    assert rc == 2
    assert needle in out
    assert len(out.strip().splitlines()) == 1, out  # one line, no traceback
    assert not (tmp_path / "b.json").exists()  # nothing written, nothing run
