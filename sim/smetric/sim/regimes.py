"""The regime map: where SMetric wins, ties and loses across deployment regimes.

A :class:`Regime` is a small typed set of overrides of the base :class:`SimConfig` (``None`` =
keep the base value). The default map varies one axis at a time around the calibrated default
(16 x Qwen3-30B on H20 96 GB, bf16 KV, global tier full, load throughput calibrated 60 Gb/s per
GPU -- docs/simulator.md "Global tier"):

* global load throughput: calibrated, 0.5x, 2x, NIC line rate;
* HBM: 96 GB (H20) and 141 GB (H20-3e: the same compute with H200-class 141 GB HBM, so only the
  memory changes; ``gpu="h200"`` would also multiply compute by 6.7x -- a different load regime);
* global tier: full, small (128 GB), none;
* KV dtype: bf16, fp8.

One axis at a time is 8 regimes; a full factorial (4 x 2 x 3 x 2 = 48, less the load axis without
a tier) does not fit the 30-minute budget on two cores (docs/simulator.md "Regime map").
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from pathlib import Path
from typing import Any

from smetric.policy.registry import BASELINE_POLICIES
from smetric.sim.config import SimConfig
from smetric.sim.stats import verdict

LINE_RATE = "line-rate"


@dataclass(frozen=True, slots=True)
class Regime:
    """Overrides of the base config; ``None`` keeps the base value."""

    name: str
    axis: str
    # per-GPU global load throughput: a multiple of the base (calibrated) value, or LINE_RATE
    load_scale: float | str | None = None
    gpu: str | None = None  # smetric.core.presets.GPUS key
    global_tier: str | None = None  # none | small | full
    kv_dtype: str | None = None  # bf16 | fp8

    def apply(self, base: SimConfig) -> SimConfig:
        cfg = base
        if self.load_scale == LINE_RATE:
            cfg = replace(cfg, global_load_gbit_s=None)
        elif isinstance(self.load_scale, float):
            if base.global_load_gbit_s is None:
                raise ValueError(f"regime {self.name}: scaling a line-rate base load throughput")
            cfg = replace(cfg, global_load_gbit_s=base.global_load_gbit_s * self.load_scale)
        if self.gpu is not None:
            cfg = replace(cfg, gpu=self.gpu)
        if self.global_tier is not None:
            cfg = replace(cfg, global_tier=self.global_tier)
        if self.kv_dtype is not None:
            cfg = replace(cfg, kv_dtype=self.kv_dtype)
        return cfg


DEFAULT_REGIMES: tuple[Regime, ...] = (
    Regime("default", "default"),
    Regime("load-0.5x", "global load", load_scale=0.5),
    Regime("load-2x", "global load", load_scale=2.0),
    Regime("load-line-rate", "global load", load_scale=LINE_RATE),
    Regime("hbm-141gb", "HBM", gpu="h20-3e"),
    Regime("tier-small", "global tier", global_tier="small"),
    Regime("tier-none", "global tier", global_tier="none"),
    Regime("kv-fp8", "KV dtype", kv_dtype="fp8"),
)

# --regime-map defaults (docs/simulator.md "Regime map" says how they fit 30 min on 2 cores)
MAP_INSTANCES = 16
MAP_RATES = "1,2,3"  # + the knee extension both ways (the knee moves ~3x across the regimes)
MAP_WARMUP_S = 1200.0
MAP_MEASURE_S = 1200.0


def regimes_by_name(names: str | None) -> tuple[Regime, ...]:
    if not names:
        return DEFAULT_REGIMES
    known = {r.name: r for r in DEFAULT_REGIMES}
    wanted = [x.strip() for x in names.split(",") if x.strip()]
    bad = [x for x in wanted if x not in known]
    if bad:
        raise ValueError(f"unknown regimes {bad}; known: {', '.join(known)}")
    return tuple(known[x] for x in wanted)


def map_cells(
    summaries: Mapping[str, Sequence[Mapping[str, Any]]], subject: str = "smetric"
) -> list[dict[str, Any]]:
    """Per regime: each policy's peak mean ± CI, the best baseline and SMetric's paired margin over it."""
    out: list[dict[str, Any]] = []
    for regime, summ in summaries.items():
        by_p = {str(e["policy"]): e for e in summ}
        base = [
            e for p, e in by_p.items()
            if p in BASELINE_POLICIES and isinstance(e["peak_tps_within_slo_mean"], int | float)
        ]  # fmt: skip
        best = max(base, key=lambda e: float(e["peak_tps_within_slo_mean"]), default=None)
        cell: dict[str, Any] = {
            "regime": regime,
            "peak_tps_within_slo_mean": {p: e["peak_tps_within_slo_mean"] for p, e in by_p.items()},
            "peak_tps_within_slo_ci95": {p: e["peak_tps_within_slo_ci95"] for p, e in by_p.items()},
            "best_baseline": None if best is None else best["policy"],
        }
        if best is not None and subject in by_p:
            m = by_p[subject]["margins"].get(best["policy"])
            if m is not None:
                cell.update(
                    margin_over_best_baseline=m["mean"],
                    margin_over_best_baseline_ci95=m["ci95"],
                    margin_over_best_baseline_pct=m["pct_mean"],
                    margin_over_best_baseline_pct_ci95=m["pct_ci95"],
                    verdict=verdict(m["pct_ci95"]),
                )
        out.append(cell)
    return out


def plot_map(cells: Sequence[Mapping[str, Any]], policies: Sequence[str], out: Path, title: str) -> None:
    """Heat map: rows = regimes, columns = policies, colour = peak TPS within SLO relative to the
    regime's best policy, text = absolute peak; last column = SMetric - best baseline (% ± CI)."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    rows = [str(c["regime"]) for c in cells]
    grid = np.full((len(rows), len(policies)), np.nan)
    for i, c in enumerate(cells):
        means = c["peak_tps_within_slo_mean"]
        vals = [float(means[p]) if isinstance(means.get(p), int | float) else math.nan for p in policies]
        top = max((v for v in vals if math.isfinite(v)), default=math.nan)
        for j, v in enumerate(vals):
            grid[i, j] = v / top if math.isfinite(v) and top > 0 else math.nan
    fig, (ax, axm) = plt.subplots(
        1, 2, figsize=(1.0 * len(policies) + 5, 0.55 * len(rows) + 2.2),
        gridspec_kw={"width_ratios": [len(policies), 2.6]},
    )  # fmt: skip
    im = ax.imshow(grid, cmap="viridis", vmin=max(0.0, float(np.nanmin(grid)) if np.isfinite(grid).any() else 0.0),
                   vmax=1.0, aspect="auto")  # fmt: skip
    ax.set_xticks(range(len(policies)), policies, rotation=55, ha="right", fontsize=8)
    ax.set_yticks(range(len(rows)), rows, fontsize=8)
    for i, c in enumerate(cells):
        means = c["peak_tps_within_slo_mean"]
        for j, p in enumerate(policies):
            v = means.get(p)
            if isinstance(v, int | float):
                ax.text(j, i, f"{v:.0f}", ha="center", va="center", fontsize=6.5,
                        color="white" if grid[i, j] < 0.9 else "black")  # fmt: skip
    fig.colorbar(im, ax=ax, fraction=0.03, pad=0.01, label="peak TPS@SLO / regime best")
    axm.set_yticks(range(len(rows)), [""] * len(rows))
    axm.set_ylim(len(rows) - 0.5, -0.5)
    axm.axvline(0.0, color="grey", lw=0.8)
    for i, c in enumerate(cells):
        pm, ci = c.get("margin_over_best_baseline_pct"), c.get("margin_over_best_baseline_pct_ci95")
        if not isinstance(pm, int | float):
            continue
        colour = {"win": "tab:green", "loss": "tab:red"}.get(str(c.get("verdict")), "tab:grey")
        if ci:
            axm.errorbar([pm], [i], xerr=[[pm - ci[0]], [ci[1] - pm]], fmt="o", color=colour, capsize=3)
        else:
            axm.plot([pm], [i], "o", color=colour)
        axm.text(1.02, i, f"vs {c['best_baseline']}", transform=axm.get_yaxis_transform(), fontsize=7,
                 va="center")  # fmt: skip
    axm.set_xlabel("SMetric - best baseline, % (paired 95 % CI)")
    fig.suptitle(title, fontsize=10)
    fig.tight_layout()
    out.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(out, dpi=110)
    plt.close(fig)
