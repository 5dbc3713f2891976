"""Readable bench output: the table fits 120 columns with every row's figures, the figure's x axis
is in agents with one legible tick per load point (no two tick labels overlap)."""

from __future__ import annotations

import dataclasses
import io
import itertools
from pathlib import Path

import pytest
from rich.console import Console

from smetric.bench import plot
from smetric.bench.metrics import Summary
from smetric.bench.report import PolicyResult
from smetric.bench.rowreport import render_rows, summary_markdown
from smetric.bench.sweep import Cell, Row, rows_of

LABELS = ("smetric", "lmetric", "vllm-router:cache_aware")
RATES = {0.000875: 8, 0.00124: 12, 0.00175: 16}


def _summary(k: int, seed: int) -> Summary:
    values = {f.name: 123.456 + k for f in dataclasses.fields(Summary)}
    values.update(n_sent=1000, n_ok=999, n_failed=1, n_not_sent=20, slo_attainment=0.5 + 0.2 * seed,
                  local_hit_ratio=0.889, ttft_p50_s=10.31, ttft_p90_s=330.03, arrival_drift=-0.10 + seed * 3.43,
                  arrival_drift_ok=False, tps_within_slo=14.0 + 3 * seed + k, router_overhead_ms=140.2)  # fmt: skip
    return Summary(**values)  # type: ignore[arg-type]


def _rows() -> list[Row]:
    cells = [Cell(rate, seed, PolicyResult(lab, "r", lab, "ok", "", _summary(k, seed)))
             for rate in RATES for seed in (0, 1) for k, lab in enumerate(LABELS)]  # fmt: skip
    rows = rows_of(cells, LABELS, knee=0.000875, past=0.00124)
    return [dataclasses.replace(r, agents=RATES[r.rate]) for r in rows]


def test_the_table_fits_120_columns_and_the_markdown_keeps_every_column() -> None:
    out = io.StringIO()
    render_rows(_rows(), Console(file=out, width=400), "smetric bench: a title that the table wraps")
    lines = out.getvalue().splitlines()
    table = lines[: next(i for i, line in enumerate(lines) if line.startswith("rate "))]
    assert max(len(line.rstrip()) for line in table) <= 120, "\n".join(table)
    text = "\n".join(table)
    assert "8 agents" in text and "vllm-router:cache_aware" in text and "10.31/330.0" in text
    assert "60.0 ± 14.1 %" in text  # the SLO attainment with its spread on one line, not wrapped
    md = summary_markdown(_rows())
    assert "all-scaled" in md and "engine TTFT" in md and "ok / sent" in md  # the rest is here
    assert "| 0.000875 | 8 | knee | smetric |" in md


def test_the_x_axis_is_in_agents_with_one_tick_per_load_point() -> None:
    xs, ticks, label = plot.load_axis(_rows())
    assert xs == {r: float(a) for r, a in RATES.items()} and list(ticks.values()) == ["8", "12", "16"]
    assert label.startswith("concurrent agents")
    no_agents = [dataclasses.replace(r, agents=None) for r in _rows()]
    assert plot.load_axis(no_agents)[2] == "family arrivals per model second"


@pytest.mark.parametrize("agents", [True, False])
def test_no_two_tick_labels_overlap(agents: bool) -> None:
    import matplotlib.pyplot as plt

    rows = _rows() if agents else [dataclasses.replace(r, agents=None) for r in _rows()]
    fig = plot.figure(rows, "t", knee=0.000875)
    fig.canvas.draw()
    renderer = fig.canvas.get_renderer()  # type: ignore[attr-defined]
    for ax in fig.axes:
        boxes = [t.get_window_extent(renderer) for t in ax.get_xticklabels() if t.get_text()]
        assert len(boxes) == len(RATES)
        boxes.sort(key=lambda b: b.x0)
        assert all(a.x1 < b.x0 for a, b in itertools.pairwise(boxes)), [b.x0 for b in boxes]
        assert ax.xaxis.label.get_window_extent(renderer).width <= ax.get_window_extent(renderer).width
    plt.close(fig)


def test_the_png_is_written(tmp_path: Path) -> None:
    plot.plot_rows(tmp_path / "b.png", _rows(), "t", knee=0.000875)
    assert (tmp_path / "b.png").read_bytes()[:4] == b"\x89PNG"


def test_the_verdict_comes_first() -> None:
    out = io.StringIO()
    render_rows(_rows(), Console(file=out, width=400), "t")
    lines = out.getvalue().splitlines()
    assert lines[0] == "verdict (TPS within SLO, paired by seed, vs smetric):"
    assert lines[1].startswith("  8 agents (knee): smetric 15.5; lmetric +1.0 ± 0.0 (better);")
    assert "vllm-router:cache_aware +2.0 ± 0.0 (better)" in lines[1]
    assert lines[4] == (
        "  smetric significantly ahead in 0 and behind in 6 of 6 comparisons; n.s. = the interval includes 0"
    )
    assert summary_markdown(_rows()).startswith("verdict (TPS within SLO")


def test_a_load_only_peer_says_so_in_the_table_and_the_figure() -> None:
    rows = [dataclasses.replace(r, label="vllm-router:kv_aware") if r.label.startswith("vllm") else r
            for r in _rows()]  # fmt: skip
    out = io.StringIO()
    render_rows(rows, Console(file=out, width=400), "t")
    assert "vllm-router:kv_aware (load only)" in out.getvalue()
    assert "vllm-router:kv_aware (load only)" in summary_markdown(rows)
    fig = plot.figure(rows, "t", knee=None)
    assert "vllm-router:kv_aware (load only)" in fig.axes[0].get_legend_handles_labels()[1]


def test_more_seeds_wrap_inside_120_columns() -> None:
    cells = [Cell(0.00128, seed, PolicyResult(lab, "r", lab, "ok", "", _summary(k, seed)))
             for seed in range(6) for k, lab in enumerate(LABELS)]  # fmt: skip
    rows = [dataclasses.replace(r, agents=12) for r in rows_of(cells, LABELS, knee=0.00128, past=None)]
    out = io.StringIO()
    render_rows(rows, Console(file=out, width=400), "t")
    lines = out.getvalue().splitlines()
    table = lines[: next(i for i, line in enumerate(lines) if line.startswith("rate "))]
    assert max(len(line.rstrip()) for line in table) <= 120, "\n".join(table)
