"""Human-readable output of a sweep: a rich table and a matplotlib (Agg) figure."""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from rich.table import Table

Row = Mapping[str, Any]


def _f(x: object, fmt: str) -> str:
    if not isinstance(x, int | float) or (isinstance(x, float) and not math.isfinite(x)):
        return "-"
    return format(x, fmt)


def headline_key(mode: str) -> str:
    return "tps_within_slo" if mode == "colocated" else "prefill_tps_within_slo"


def results_table(rows: Sequence[Row], mode: str, title: str) -> Table:
    """One line per (rate, policy), best headline first within a rate."""
    key = headline_key(mode)
    t = Table(title=title, show_lines=False)
    cols = [
        ("rate", "right"),
        ("fam/s", "right"),
        ("req/s", "right"),
        ("policy", "left"),
        ("TPS@SLO" if mode == "colocated" else "prefill ktok/s", "right"),
        ("SLO %", "right"),
        ("TTFT p50/p90 s", "right"),
        ("TPOT p90 ms", "right"),
        ("reuse/local/global %", "right"),
        ("imb mean/p99", "right"),
        ("wall s", "right"),
    ]
    for name, justify in cols:
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    by_rate: dict[float, list[Row]] = {}
    for r in rows:
        by_rate.setdefault(float(r["rate_multiplier"]), []).append(r)
    for rate in sorted(by_rate):
        group = sorted(by_rate[rate], key=lambda r: -float(r[key]) if math.isfinite(float(r[key])) else 0.0)
        for k, r in enumerate(group):
            head = float(r[key]) if mode == "colocated" else float(r[key]) / 1e3
            t.add_row(
                f"{rate:g}x" if k == 0 else "",
                _f(r["families_per_s"], ".3f") if k == 0 else "",
                _f(r["requests_per_s"], ".2f"),
                str(r["policy"]),
                _f(head, ".0f" if mode == "colocated" else ".1f"),
                _f(100 * float(r["slo_attainment"]), ".1f"),
                f"{_f(r['ttft_p50_s'], '.2f')}/{_f(r['ttft_p90_s'], '.1f')}",
                _f(1e3 * float(r["tpot_p90_s"]), ".1f"),
                "/".join(
                    _f(100 * float(r[c]), ".0f")
                    for c in ("reuse_ratio", "local_hit_ratio", "global_hit_ratio")
                ),
                f"{_f(r['imbalance_mean'], '.2f')}/{_f(r['imbalance_p99'], '.2f')}",
                _f(r["sim_wall_s"], ".1f"),
            )
        t.add_section()
    return t


def plot(rows: Sequence[Row], mode: str, out: Path, title: str) -> None:
    """Three panels: headline TPS vs rate, imbalance vs rate, reuse breakdown at each policy's peak."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key = headline_key(mode)
    policies = list(dict.fromkeys(str(r["policy"]) for r in rows))
    fig, axes = plt.subplots(1, 3, figsize=(18, 5.5))
    ax_tps, ax_imb, ax_reuse = axes
    peaks: list[Row] = []
    cmap = plt.get_cmap("tab20")
    markers = "os^vD<>ph*XP8"
    for n, p in enumerate(policies):
        style = {
            "color": cmap(n % 20),
            "marker": markers[n % len(markers)],
            "linestyle": "-" if p.startswith("smetric") else "--",
        }
        pr = sorted((r for r in rows if r["policy"] == p), key=lambda r: float(r["rate_multiplier"]))
        xs = [float(r["rate_multiplier"]) for r in pr]
        scale = 1.0 if mode == "colocated" else 1e-3
        ax_tps.plot(xs, [float(r[key]) * scale for r in pr], label=p, **style)
        ax_imb.plot(xs, [float(r["imbalance_mean"]) for r in pr], label=p, **style)
        finite = [r for r in pr if math.isfinite(float(r[key]))]
        if finite:
            peaks.append(max(finite, key=lambda r: float(r[key])))
    ax_tps.set_xlabel("rate (x base)")
    ax_tps.set_ylabel("output TPS within SLO" if mode == "colocated" else "prefill ktok/s within TTFT SLO")
    ax_tps.set_title("throughput within SLO")
    ax_tps.legend(fontsize=7)
    ax_imb.set_xlabel("rate (x base)")
    ax_imb.set_ylabel("max/mean load per 30 s window (mean)")
    ax_imb.set_title("load imbalance")
    names = [str(r["policy"]) for r in peaks]
    loc = [100 * float(r["local_hit_ratio"]) for r in peaks]
    glo = [100 * float(r["global_hit_ratio"]) for r in peaks]
    comp = [max(0.0, 100.0 - a - b) for a, b in zip(loc, glo, strict=True)]
    ax_reuse.barh(names, loc, label="local tier")
    ax_reuse.barh(names, glo, left=loc, label="global tier")
    ax_reuse.barh(names, comp, left=[a + b for a, b in zip(loc, glo, strict=True)], label="computed")
    ax_reuse.set_xlabel("% of prompt tokens (at each policy's peak rate)")
    ax_reuse.set_title("reuse breakdown")
    ax_reuse.legend(fontsize=7)
    fig.suptitle(title)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
