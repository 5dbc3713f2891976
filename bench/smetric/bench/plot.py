"""The bench's figure: four panels against the load, one line per front end.

The x axis is the number of steady agents when every plotted row ran with ``--arrivals agents``
(what the README speaks of), else the family arrival rate; its ticks sit at the load points
themselves, labelled in full, so they never run into one another.
"""

from __future__ import annotations

import math
import textwrap
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING

from smetric.bench.sweep import Row, shown_label

if TYPE_CHECKING:
    from matplotlib.figure import Figure

PANELS: tuple[tuple[str, str, float, str], ...] = (
    # (summary field, title, scale, which way is better)
    ("tps_within_slo", "TPS within SLO (tok/s, model time)", 1.0, "higher is better"),
    ("slo_attainment", "SLO attainment (%)", 100.0, "higher is better"),
    ("ttft_p90_s", "TTFT p90 (model s)", 1.0, "lower is better"),
    (
        "local_hit_ratio",
        "local prefix-cache hits (% of prompt tokens)",
        100.0,
        "prefix reuse on the chosen engine",
    ),
)
MAX_LABELLED_TICKS = 8  # more load points than this: ticks from matplotlib's integer locator


def _range(row: Row, name: str, scale: float) -> tuple[float, float]:
    """(min, max) over the row's seeds (the mean twice with one seed)."""
    vals = [float(p[name]) * scale for p in row.per_seed if isinstance(p.get(name), int | float)]
    vals = [v for v in vals if not math.isnan(v)]
    mean = row.mean(name) * scale
    return (min(vals), max(vals)) if vals else (mean, mean)


def load_axis(rows: Sequence[Row]) -> tuple[dict[float, float], dict[float, str], str]:
    """Per rate: its x value and tick label, and the axis label. Agents when every row has them."""
    rates = sorted({r.rate for r in rows})
    agents = {r.rate: r.agents for r in rows}
    if rates and all(agents[r] is not None for r in rates):
        xs = {r: float(agents[r] or 0) for r in rates}
        ticks = {r: f"{agents[r]}" for r in rates}
        return xs, ticks, "concurrent agents (steady load)"
    return {r: r for r in rates}, {r: f"{r:.3g}" for r in rates}, "family arrivals per model second"


def plot_rows(path: Path, rows: Sequence[Row], title: str, knee: float | None) -> None:
    """Write :func:`figure` as a PNG."""
    import matplotlib.pyplot as plt

    fig = figure(rows, title, knee)
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)


def figure(rows: Sequence[Row], title: str, knee: float | None) -> Figure:
    """One panel per metric against the load, one line per front end (the mean over seeds),
    error bars = min..max over seeds; the legend sits below the panels, outside the data."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    from matplotlib.ticker import MaxNLocator

    shown = [r for r in rows if r.summary is not None]
    labels = list(dict.fromkeys(r.label for r in shown))
    xs_of, tick_of, xlabel = load_axis(shown)
    fig, grid = plt.subplots(2, 2, figsize=(11.0, 8.6))
    axes = list(grid.flat)
    markers = "osD^vP*Xh<>"
    xs_all = sorted(set(xs_of.values()))
    # small horizontal offsets so the error bars of different rows at one load do not hide each other
    dodge = 0.012 * (xs_all[-1] - xs_all[0] if len(xs_all) > 1 else (xs_all[0] if xs_all else 1.0))
    for ax, (name, heading, scale, better) in zip(axes, PANELS, strict=True):
        for i, lab in enumerate(labels):
            mine = sorted((r for r in shown if r.label == lab), key=lambda r: r.rate)
            xs = [xs_of[r.rate] + (i - (len(labels) - 1) / 2) * dodge for r in mine]
            ys = [r.mean(name) * scale for r in mine]
            lo, hi = zip(*(_range(r, name, scale) for r in mine), strict=True) if mine else ((), ())
            es = [
                [max(y - a, 0.0) for y, a in zip(ys, lo, strict=True)],
                [max(b - y, 0.0) for y, b in zip(ys, hi, strict=True)],
            ]
            ax.errorbar(xs, ys, yerr=es, marker=markers[i % len(markers)], capsize=3, label=shown_label(lab),
                        linestyle="--" if lab.startswith("vllm-router") else "-")  # fmt: skip
        if name == "slo_attainment":
            ax.axhline(90.0, color="grey", linewidth=1.0, linestyle=":")
            ax.annotate("90 %: the knee's threshold", (0.01, 90.0), xycoords=("axes fraction", "data"),
                        xytext=(0, -13), textcoords="offset points", fontsize=10, color="dimgrey")  # fmt: skip
        if knee is not None and knee in xs_of:
            ax.axvline(xs_of[knee], color="grey", linewidth=1.0, linestyle="--")
        if len(xs_of) <= MAX_LABELLED_TICKS:
            ax.set_xticks([xs_of[r] for r in sorted(xs_of)], [tick_of[r] for r in sorted(xs_of)])
        else:
            ax.xaxis.set_major_locator(MaxNLocator(nbins=6))
        ax.set_title(f"{heading}\n({better})", fontsize=12)
        ax.set_xlabel(xlabel + ("\n(dashed line: knee)" if knee in xs_of else ""), fontsize=10)
        ax.tick_params(labelsize=10)
        ax.grid(alpha=0.3)
    handles, names = axes[0].get_legend_handles_labels()
    fig.legend(handles, names, loc="lower center", ncol=min(len(names), 4), fontsize=11, frameon=False)
    fig.suptitle("\n".join(textwrap.wrap(title, 110)), fontsize=11.5)
    rows_of_legend = math.ceil(max(len(names), 1) / 4)
    fig.tight_layout(rect=(0.0, 0.04 * rows_of_legend + 0.01, 1.0, 1.0))
    return fig
