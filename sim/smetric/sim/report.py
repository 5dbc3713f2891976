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


def _pct100(x: object) -> object:
    return 100 * float(x) if isinstance(x, int | float) else None


def _with_nan(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """JSON rows carry null for undefined metrics; the tables and plots want NaN."""
    return [{k: math.nan if v is None else v for k, v in r.items()} for r in rows]


def headline_key(mode: str) -> str:
    return "tps_within_slo" if mode == "colocated" else "prefill_tps_within_slo"


def results_table(rows: Sequence[Row], mode: str, title: str) -> Table:
    """One line per (rate, policy), best headline first within a rate."""
    rows = list[Row](_with_nan(rows))
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
        ("arrivals drift %", "right"),
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
                _f(_pct100(r.get("arrival_drift")), "+.0f"),
            )
        t.add_section()
    return t


def plot(rows: Sequence[Row], mode: str, out: Path, title: str) -> None:
    """Three panels: headline TPS vs rate, imbalance vs rate, reuse breakdown at each policy's peak."""
    rows = list[Row](_with_nan(rows))
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


# two-sided 95 % Student t quantiles by degrees of freedom (1..9)
_T95 = (12.706, 4.303, 3.182, 2.776, 2.571, 2.447, 2.365, 2.306, 2.262)


def mean_ci(values: Sequence[float]) -> tuple[float, float]:
    """Mean and the half-width of its two-sided 95 % t-interval (0 with fewer than two values)."""
    vals = [v for v in values if math.isfinite(v)]
    if not vals:
        return math.nan, 0.0
    mean = sum(vals) / len(vals)
    if len(vals) < 2:
        return mean, 0.0
    sd = math.sqrt(sum((v - mean) ** 2 for v in vals) / (len(vals) - 1))
    return mean, _T95[min(len(vals) - 2, len(_T95) - 1)] * sd / math.sqrt(len(vals))


def headline_path(plot_path: Path) -> Path:
    """Where ``--plot out/x.png`` writes the headline figure: ``out/x-tps.png``."""
    return plot_path.with_name(f"{plot_path.stem}-tps{plot_path.suffix or '.png'}")


def plot_headline(rows: Sequence[Row], mode: str, out: Path, title: str) -> None:
    """The simulator's headline: TPS within SLO against the offered load, one line per policy (the
    mean over seeds) in a band of its 95 % t-interval; ``rows`` are the per-seed runs."""
    rows = list[Row](_with_nan(rows))
    import textwrap

    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    key, scale = headline_key(mode), 1.0 if mode == "colocated" else 1e-3
    policies = list(dict.fromkeys(str(r["policy"]) for r in rows))
    seeds = sorted({int(r["seed"]) for r in rows if "seed" in r})
    fig, ax = plt.subplots(figsize=(9.0, 6.0))
    cmap = plt.get_cmap("tab10" if len(policies) <= 10 else "tab20")
    for n, p in enumerate(policies):
        by_rate: dict[float, list[float]] = {}
        for r in rows:
            if r["policy"] == p:
                by_rate.setdefault(float(r["rate_multiplier"]), []).append(float(r[key]) * scale)
        xs = sorted(by_rate)
        stats = [mean_ci(by_rate[x]) for x in xs]
        mean = [m for m, _ in stats]
        color = cmap(n % cmap.N)
        ax.plot(
            xs, mean, marker="o", color=color, label=p, linestyle="-" if p.startswith("smetric") else "--"
        )
        ax.fill_between(
            xs,
            [max(0.0, m - h) for m, h in stats],
            [m + h for m, h in stats],
            color=color,
            alpha=0.15,
            linewidth=0,
        )
    ax.set_xlabel("offered load (x base rate)", fontsize=12)
    ax.set_ylabel(
        "output tokens/s within SLO" if mode == "colocated" else "prefill ktok/s within the TTFT SLO",
        fontsize=12,
    )
    ax.set_title(f"throughput within SLO: mean over {len(seeds)} seeds, band = 95 % t-interval", fontsize=12)
    ax.tick_params(labelsize=11)
    ax.grid(alpha=0.3)
    ax.legend(fontsize=11)
    fig.suptitle("\n".join(textwrap.wrap(title, 90)), fontsize=11)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)


def mean_rows(rows: Sequence[Row]) -> list[dict[str, Any]]:
    """One row per (policy, rate): numeric fields averaged over the seeds that ran that rate
    (undefined values skipped), other fields from the first seed."""
    groups: dict[tuple[str, float], list[Row]] = {}
    for r in rows:
        groups.setdefault((str(r["policy"]), float(r["rate_multiplier"])), []).append(r)
    out: list[dict[str, Any]] = []
    for (_, _), rs in groups.items():
        m: dict[str, Any] = dict(rs[0])
        for k, v in rs[0].items():
            if (
                isinstance(v, int | float)
                and not isinstance(v, bool)
                and k not in ("seed", "rate_multiplier")
            ):
                xs = [
                    float(r[k])
                    for r in rs
                    if isinstance(r.get(k), int | float) and math.isfinite(float(r[k]))
                ]
                m[k] = sum(xs) / len(xs) if xs else math.nan
            elif v is None:
                m[k] = math.nan
        m["seeds"] = len(rs)
        out.append(m)
    return out


def _pm(mean: object, ci: object, fmt: str) -> str:
    if not isinstance(mean, int | float):
        return "-"
    if isinstance(ci, list | tuple) and len(ci) == 2:
        return f"{format(mean, fmt)} ± {format((ci[1] - ci[0]) / 2, fmt)}"
    return format(mean, fmt)


def summary_table(summ: Sequence[Row], title: str) -> Table:
    """Per policy: peak mean ± CI half-width, per-seed peaks and peak rates, and the paired margin
    over the best baseline (or, for a baseline, over SMetric)."""
    from smetric.policy.registry import BASELINE_POLICIES
    from smetric.sim.stats import verdict

    t = Table(title=title)
    for name, justify in (("policy", "left"), ("peak mean ± CI", "right"), ("per seed", "right"),
                          ("peak rate", "right"), ("past knee", "center"), ("vs", "left"),
                          ("margin % (paired CI)", "right"), ("", "left")):  # fmt: skip
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    means = {str(e["policy"]): e["peak_tps_within_slo_mean"] for e in summ}
    base = [p for p in means if p in BASELINE_POLICIES and isinstance(means[p], int | float)]
    best = max(base, key=lambda p: float(means[p]), default=None)
    for e in sorted(
        summ,
        key=lambda e: (
            -float(e["peak_tps_within_slo_mean"])
            if isinstance(e["peak_tps_within_slo_mean"], int | float)
            and math.isfinite(float(e["peak_tps_within_slo_mean"]))
            else 0.0
        ),
    ):
        p = str(e["policy"])
        other = best if p != best else ("smetric" if "smetric" in means else None)
        m = e["margins"].get(other) if other else None
        t.add_row(
            p,
            _pm(e["peak_tps_within_slo_mean"], e["peak_tps_within_slo_ci95"], ".0f"),
            "/".join(_f(v, ".0f") for v in e["peak_tps_within_slo_per_seed"]),
            "/".join(_f(v, "g") for v in e["peak_rate_multiplier_per_seed"]),
            "/".join("y" if k else "n" for k in e["past_knee_per_seed"]),
            other or "",
            _pm(m["pct_mean"], m["pct_ci95"], "+.1f") if m else "-",
            verdict(m["pct_ci95"]) if m else "",
        )
    return t


def map_table(cells: Sequence[Row], title: str) -> Table:
    t = Table(title=title)
    for name, justify in (("regime", "left"), ("smetric", "right"), ("best baseline", "left"),
                          ("its peak", "right"), ("margin % (paired CI)", "right"), ("", "left")):  # fmt: skip
        t.add_column(name, justify=justify)  # type: ignore[arg-type]
    for c in cells:
        b = c.get("best_baseline")
        t.add_row(
            str(c["regime"]),
            _pm(
                c["peak_tps_within_slo_mean"].get("smetric"),
                c["peak_tps_within_slo_ci95"].get("smetric"),
                ".0f",
            ),
            str(b or "-"),
            _pm(c["peak_tps_within_slo_mean"].get(b), c["peak_tps_within_slo_ci95"].get(b), ".0f")
            if b
            else "-",
            _pm(c.get("margin_over_best_baseline_pct"), c.get("margin_over_best_baseline_pct_ci95"), "+.1f"),
            str(c.get("verdict", "")),
        )
    return t
