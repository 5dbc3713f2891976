"""Bench output: a rich table, the JSON document and a matplotlib figure."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import orjson
from rich.console import Console
from rich.table import Table

from smetric.bench.metrics import Summary
from smetric.bench.replay import RequestRecord


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """One row: a policy behind a router, its summary, or why it could not run."""

    label: str  # e.g. "smetric" or "vllm-router:kv_aware"
    router: str  # "envoy+smetric-epp" | "vllm-router"
    policy: str
    status: str  # "ok" | "failed" | "skipped"
    note: str = ""
    summary: Summary | None = None


def _fmt(value: float, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def _pct(value: float, sep: str = "") -> str:
    text = _fmt(value * 100, ".1f")
    return text if text == "-" else f"{text}{sep}%"


def _unit(value: float, spec: str, unit: str) -> str:
    text = _fmt(value, spec)
    return text if text == "-" else text + unit


def render_table(results: Sequence[PolicyResult], console: Console, title: str) -> None:
    table = Table(title=title, header_style="bold")
    cols = [
        ("policy", "left"),
        ("router", "left"),
        ("TPS in SLO", "right"),
        ("SLO att.", "right"),
        ("TTFT p50", "right"),
        ("TTFT p90", "right"),
        ("TPOT p50", "right"),
        ("engine TTFT", "right"),
        ("local hit", "right"),
        ("imbalance", "right"),
        ("router ms", "right"),
        ("ok/sent", "right"),
    ]
    for name, justify in cols:
        table.add_column(name, justify=justify)  # type: ignore[arg-type]
    for r in results:
        s = r.summary
        if s is None:
            table.add_row(r.label, r.router, f"[yellow]{r.status}[/]: {r.note}", *[""] * (len(cols) - 3))
            continue
        table.add_row(
            r.label,
            r.router,
            _fmt(s.tps_within_slo, ".1f"),
            _pct(s.slo_attainment),
            _unit(s.ttft_p50_s, ".2f", "s"),
            _unit(s.ttft_p90_s, ".2f", "s"),
            _unit(s.tpot_p50_s * 1000, ".1f", "ms"),
            _unit(s.engine_ttft_mean_s, ".2f", "s"),
            _pct(s.local_hit_ratio),
            _unit(s.imbalance_mean, ".2f", "x"),
            _fmt(s.router_overhead_ms, ".1f"),
            f"{s.n_ok}/{s.n_sent}",
        )
    console.print(table)


def to_markdown(results: Sequence[PolicyResult]) -> str:
    """The summary as a Markdown table (for docs and issue comments)."""
    head = (
        "| policy | router | TPS in SLO | SLO att. | TPS in SLO / SLO att., all scaled | TTFT p50 / p90 (s) | TPOT p50 (ms) | engine TTFT (s) "
        "| local hit | usage hit | imbalance | router ms (share of e2e) | ok / sent |"
    )
    lines = [head, "|" + "---|" * 13]
    for r in results:
        s = r.summary
        if s is None:
            lines.append(f"| {r.label} | {r.router} | {r.status}: {r.note} |" + " |" * 10)
            continue
        lines.append(
            f"| {r.label} | {r.router} | {_fmt(s.tps_within_slo, '.1f')} | {_pct(s.slo_attainment, ' ')} "
            f"| {_fmt(s.tps_within_slo_all_scaled, '.1f')} / {_pct(s.slo_attainment_all_scaled, ' ')} "
            f"| {_fmt(s.ttft_p50_s, '.2f')} / {_fmt(s.ttft_p90_s, '.2f')} | {_fmt(s.tpot_p50_s * 1000, '.1f')} "
            f"| {_fmt(s.engine_ttft_mean_s, '.2f')} | {_pct(s.local_hit_ratio, ' ')} "
            f"| {_pct(s.usage_hit_ratio, ' ')} | {_unit(s.imbalance_mean, '.2f', '×')} "
            f"| {_fmt(s.router_overhead_ms, '.1f')} ({_pct(s.router_share_of_e2e, ' ')}) "
            f"| {s.n_ok} / {s.n_sent} |"
        )
    return "\n".join(lines) + "\n"


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN
    if isinstance(value, Mapping):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def to_json(results: Sequence[PolicyResult], meta: Mapping[str, Any]) -> bytes:
    doc = {
        "meta": dict(meta),
        "results": [dataclasses.asdict(r) for r in results],
    }
    return orjson.dumps(_clean(doc), option=orjson.OPT_INDENT_2)


def record_line(label: str, record: RequestRecord, **extra: Any) -> bytes:
    """One request as a JSON line (the response text left out); ``extra`` keys (rate, seed) added."""
    doc = dataclasses.asdict(record)
    doc["outcome"].pop("text", None)
    doc["label"] = label
    doc.update(extra)
    return orjson.dumps(_clean(doc)) + b"\n"


def write_json(path: Path, results: Sequence[PolicyResult], meta: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(to_json(results, meta))


def write_plot(path: Path, results: Sequence[PolicyResult], title: str) -> None:
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt

    rows = [r for r in results if r.summary is not None]
    labels = [r.label for r in rows]
    sums = [r.summary for r in rows if r.summary is not None]
    fig, axes = plt.subplots(1, 4, figsize=(16, 4.2))
    panels: list[tuple[str, list[list[float]], list[str]]] = [
        ("TPS within SLO (tok/s, model time)", [[s.tps_within_slo for s in sums]], ["TPS"]),
        (
            "TTFT (s, model time)",
            [[s.ttft_p50_s for s in sums], [s.ttft_p90_s for s in sums]],
            ["p50", "p90"],
        ),
        ("local prefix-hit ratio", [[s.local_hit_ratio for s in sums]], ["hit"]),
        ("load imbalance (max/mean running)", [[s.imbalance_mean for s in sums]], ["mean"]),
    ]
    x = list(range(len(labels)))
    for ax, (name, series, legend) in zip(axes, panels, strict=True):
        width = 0.8 / len(series)
        for i, (values, lab) in enumerate(zip(series, legend, strict=True)):
            clean = [0.0 if math.isnan(v) else v for v in values]
            ax.bar([xi + (i - (len(series) - 1) / 2) * width for xi in x], clean, width, label=lab)
        ax.set_title(name, fontsize=10)
        ax.set_xticks(x)
        ax.set_xticklabels(labels, rotation=35, ha="right", fontsize=8)
        if len(series) > 1:
            ax.legend(fontsize=8)
    fig.suptitle(title, fontsize=11)
    fig.tight_layout()
    path.parent.mkdir(parents=True, exist_ok=True)
    fig.savefig(path, dpi=110)
    plt.close(fig)
