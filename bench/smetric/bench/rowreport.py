"""Output of a bench sweep: the rich table, the Markdown table, the JSON document and the figure.

Each :class:`~smetric.bench.sweep.Row` is one front end at one rate over its seeds: means, and the
sample standard deviation over seeds as ``±``.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import orjson
from rich import box
from rich.console import Console
from rich.table import Table

from smetric.bench.plot import plot_rows as plot_rows  # re-exported: cli, tests
from smetric.bench.report import _clean, _fmt, _pct
from smetric.bench.sweep import Row, pooled, row_dict, shown_label
from smetric.sim.metrics import MAX_ARRIVAL_DRIFT


def _pm(row: Row, name: str, spec: str, scale: float = 1.0) -> str:
    mean, spread = row.mean(name) * scale, row.spread(name) * scale
    text = _fmt(mean, spec)
    return text if math.isnan(spread) or text == "-" else f"{text} ± {_fmt(spread, spec)}"


def _pct_pm(row: Row, name: str) -> str:
    return _pm(row, name, ".1f", 100.0) + ("" if math.isnan(row.mean(name)) else " %")


def _ok_sent(row: Row, sep: str = "/") -> str:
    """ok / sent / not sent (planned = sent + not sent), summed over seeds."""
    sent, not_sent = int(row.mean("n_sent")), int(row.mean("n_not_sent"))
    return f"{int(row.mean('n_ok'))}{sep}{sent}{sep}{not_sent} of {sent + not_sent}"


def _drift_pct(drift: float, ok: bool) -> str:
    """A drift in whole percent; to a tenth where whole percent would hide that it is outside the bound."""
    text = f"{100 * drift:+.0f}"
    if not ok and abs(round(100 * drift)) <= 100 * MAX_ARRIVAL_DRIFT:
        text = f"{100 * drift:+.1f}"
    return text


def drift_text(row: Row) -> str:
    """Each seed's arrival drift in %, a run outside the bound (``arrival_drift_ok`` false) marked ``!``."""
    parts: list[str] = []
    for seed in row.per_seed:
        d = seed.get("arrival_drift")
        if not isinstance(d, int | float):
            continue  # the seed did not run
        ok = bool(seed.get("arrival_drift_ok"))
        parts.append(("-" if math.isnan(d) else _drift_pct(d, ok)) + ("" if ok else "!"))
    return " ".join(parts) or "-"


def drift_warnings(rows: Sequence[Row]) -> list[str]:
    """One line naming every run (front end, rate, seed) whose arrival drift is outside the bound."""
    runs = [(r, s) for r in rows for s in r.per_seed if "arrival_drift_ok" in s]
    bad = [(r, s) for r, s in runs if not s["arrival_drift_ok"]]
    if not bad:
        return []

    def one(r: Row, s: Mapping[str, Any]) -> str:
        d = s.get("arrival_drift")
        pct = "no send in the first quarter" if d is None or math.isnan(d) else f"{_drift_pct(d, False)} %"
        return f"{r.label} rate {r.rate:g} seed {s['seed']} ({pct})"

    shown = ", ".join(one(r, s) for r, s in bad[:8])
    return [
        f"warning: {len(bad)} of {len(runs)} runs drifted by more than {100 * MAX_ARRIVAL_DRIFT:.0f} % (requests "
        "sent in the measured window's last quarter vs its first; arrival_drift_ok false in the JSON): "
        f"{shown}{' ...' if len(bad) > 8 else ''}"
    ]


def verdict(row: Row) -> str:
    """One line on the row's paired TPS-within-SLO difference to the reference row."""
    p = row.paired
    if not p:
        return ""
    mean, half, ref = p["mean"], p.get("ci95"), p["vs"]
    if half is None:
        return f"{row.label} - {ref}: {mean:+.1f} TPS in SLO (one seed: no interval, no verdict)"
    lo, hi = mean - half, mean + half
    if lo > 0:
        word = f"{row.label} is better than {ref}"
    elif hi < 0:
        word = f"{row.label} is worse than {ref}"
    else:
        word = f"no significant difference between {row.label} and {ref}"
    return (
        f"{word}: {mean:+.1f} TPS in SLO, 95 % CI [{lo:+.1f}, {hi:+.1f}] over {len(p['seeds'])} paired seeds"
    )


def verdict_lines(rows: Sequence[Row]) -> list[str]:
    """Per rate: the best row by mean TPS within SLO, then each row's paired verdict."""
    out: list[str] = []
    for rate in sorted({r.rate for r in rows}):
        mine = [r for r in rows if r.rate == rate and r.summary is not None]
        if not mine:
            continue
        best = max(mine, key=lambda r: r.mean("tps_within_slo"))
        out.append(f"rate {rate:g} ({mine[0].point}): highest mean TPS in SLO: {best.label}")
        out += [f"  {v}" for v in map(verdict, mine) if v]
    return out


def _short(row: Row) -> str:
    """A row's paired difference to the reference in a few characters, with its verdict."""
    p = row.paired
    if not p:
        return f"{shown_label(row.label)} -"
    half = p.get("ci95")
    if half is None:
        return f"{shown_label(row.label)} {p['mean']:+.1f} (one seed)"
    return f"{shown_label(row.label)} {p['mean']:+.1f} ± {half:.1f} ({_word(p['mean'], half)})"


def _word(mean: float, half: float) -> str:
    """better / worse when the interval ``mean ± half`` excludes 0, else n.s."""
    return "better" if mean - half > 0 else "worse" if mean + half < 0 else "n.s."


def headline(rows: Sequence[Row]) -> list[str]:
    """The verdict first: per load point the reference row's TPS in SLO and every other row's paired
    difference to it (95 % interval; better / worse / n.s. = no significant difference), then how
    often the reference was significantly better or worse."""
    ran = [r for r in rows if r.summary is not None]
    ref = next((r.paired["vs"] for r in ran if r.paired), "")
    if not ref:
        return []
    out = [f"verdict (TPS within SLO, paired by seed, vs {ref}):"]
    better = worse = total = 0
    for rate in sorted({r.rate for r in ran}):
        mine = [r for r in ran if r.rate == rate]
        base = next((r for r in mine if r.label == ref), None)
        if base is None:
            continue
        load = f"{base.agents} agents" if base.agents is not None else f"rate {rate:.3g}"
        others = [r for r in mine if r.paired and r.paired.get("ci95") is not None]
        total += len(others)
        better += sum(1 for r in others if r.paired and r.paired["mean"] + r.paired["ci95"] < 0)
        worse += sum(1 for r in others if r.paired and r.paired["mean"] - r.paired["ci95"] > 0)
        parts = "; ".join(_short(r) for r in mine if r.label != ref)
        out.append(f"  {load} ({base.point}): {ref} {base.mean('tps_within_slo'):.1f}; {parts}")
    if total:
        out.append(f"  {ref} significantly ahead in {better} and behind in {worse} of {total} comparisons; "
                   "n.s. = the interval includes 0")  # fmt: skip
    out += pooled_lines(rows)
    return out


def _pooled_short(p: Mapping[str, Any]) -> str:
    half = p["ci95_pct"]
    if half is None:
        return f"{shown_label(p['label'])} {p['mean_pct']:+.1f} % (one pair)"
    mean = p["mean_pct"]
    return f"{shown_label(p['label'])} {mean:+.1f} % [{mean - half:+.1f}, {mean + half:+.1f}] ({_word(mean, half)})"


def pooled_lines(rows: Sequence[Row]) -> list[str]:
    """The verdict over every load point at once (:func:`smetric.bench.sweep.pooled`): each front
    end's TPS in SLO in % of the reference's, one pair per (load, seed)."""
    pools = [p for p in pooled(rows) if p["loads"] > 1]
    if not pools:
        return []
    p0 = pools[0]
    skipped = sum(p["skipped"] for p in pools)
    tail = f"; {skipped} pairs without a ratio (reference 0)" if skipped else ""
    if all((p["loads"], p["pairs"]) == (p0["loads"], p0["pairs"]) for p in pools):
        head = (
            f"  over all {p0['loads']} loads ({p0['pairs']} paired runs, % of {p0['vs']}'s TPS in SLO{tail}):"
        )
        return [head, *(f"    {_pooled_short(p)}" for p in pools)]
    # a front end with a failed run has fewer pairs than another: each line says its own
    head = f"  over all loads (% of {p0['vs']}'s TPS in SLO{tail}):"
    return [
        head,
        *(f"    {_pooled_short(p)}, {p['pairs']} paired runs over {p['loads']} loads" for p in pools),
    ]


NOT_SENT = (
    "not sent: each session is a closed loop (its next turn leaves when the previous answer is back, as an "
    "agent's does), so turns still waiting for their predecessor when the window ends are never sent; a "
    "slower cluster sends fewer. Rates compare routers by what they served within SLO, not by what was sent."
)


def load_lines(row: Row) -> list[str]:
    """The load point of a row, one line per table row of its rate: agents, rate, point."""
    if row.agents is None:
        return [f"rate {row.rate:.3g}", row.point]
    return [f"{row.agents} agents", f"{row.rate:.3g}/s", row.point]


def _cpu_ms(row: Row) -> float:
    """Router + client CPU milliseconds per request (NaN when either was not measured)."""
    return row.mean("cpu_router_ms") + row.mean("cpu_client_ms")


TABLE_WIDTH = 120


def render_rows(rows: Sequence[Row], console: Console, title: str) -> None:
    """The summary table, at most 120 columns wide (every column: ``--markdown`` and the JSON)."""
    table = Table(
        title=title,
        header_style="bold",
        caption=CAPTION,
        box=box.SIMPLE_HEAD,
        pad_edge=False,
        collapse_padding=True,
    )
    ref = next((r.paired["vs"] for r in rows if r.paired), "")
    heads = ["load", "policy", "TPS in SLO", f"Δ vs {ref}\n(95 % CI)" if ref else "Δ", "SLO att.",
             "TTFT s\np50/p90", "local\nhit", "router ms\nwall/CPU", "drift %\nper seed"]  # fmt: skip
    for i, h in enumerate(heads):
        # the policy and the SLO attainment stay on one line (its " %" alone on the next was unreadable)
        table.add_column(h, justify="left" if i <= 1 else "right", no_wrap=i in (1, 4))
    last_rate, k = None, 0
    for r in rows:
        if last_rate is not None and r.rate != last_rate:
            table.add_section()
        k = k + 1 if r.rate == last_rate else 0
        last_rate = r.rate
        lines = load_lines(r)  # spread over the rows of its rate (the last row takes what is left)
        last_of_rate = r is rows[-1] or rows[rows.index(r) + 1].rate != r.rate
        load = "\n".join(lines[k:]) if last_of_rate else (lines[k] if k < len(lines) else "")
        head = [load, shown_label(r.label)]
        if r.summary is None:
            table.add_row(*head, f"[yellow]{r.status}[/]: {r.note}"[:60], *[""] * (len(heads) - 3))
            continue
        table.add_row(
            *head,
            _pm(r, "tps_within_slo", ".1f"),
            _paired(r),
            _pct_pm(r, "slo_attainment"),
            f"{_fmt(r.mean('ttft_p50_s'), '.2f')}/{_fmt(r.mean('ttft_p90_s'), '.1f')}",
            _pct(r.mean("local_hit_ratio")),
            f"{_fmt(r.mean('router_overhead_ms'), '.0f')}/{_fmt(_cpu_ms(r), '.0f')}",
            drift_text(r),
        )
    for line in headline(rows):
        console.print(line, markup=False)
    console.print(table, width=min(console.width, TABLE_WIDTH))  # more seeds: the drift cell wraps
    for line in verdict_lines(rows):
        console.print(line)
    for line in drift_warnings(rows):
        console.print(line, style="yellow", markup=False)
    console.print(NOT_SENT, style="dim")


CAPTION = (
    "load: steady agents and session families per model second; ± = std over seeds. TPS in SLO, SLO att., TTFT: "
    "engine time / time scale + router/network time unscaled (split). router ms: client TTFT - the engine's, "
    "wall; CPU: router + client CPU time per request. Drift: requests sent in the window's last quarter / "
    "first - 1, per seed; ! = outside +-10 %. Every column (all-scaled, engine TTFT, counts): --markdown, JSON."
)


def rows_markdown(rows: Sequence[Row]) -> str:
    head = (
        "| rate | agents | point | policy | router | seeds | TPS in SLO | Δ TPS vs first row, paired (95 % CI) | SLO att. | all-scaled TPS / att. "
        "| TTFT p50 / p90 (s) | TPOT p50 (ms) | engine TTFT (s) | local hit | usage hit | router / emulator ms "
        "| CPU ms per request: router / client / engines | CPU share of the box "
        "| arrival drift % per seed (! > 10 %) | ok / sent / not sent of planned |"
    )
    lines = [head, "|" + "---|" * 20]
    for r in rows:
        agents = "-" if r.agents is None else str(r.agents)
        lead = f"| {r.rate:g} | {agents} | {r.point} | {shown_label(r.label)} | {r.router} | {len(r.seeds)} "
        if r.summary is None:
            lines.append(lead + f"| {r.status}: {r.note} |" + " |" * 13)
            continue
        lines.append(
            lead + f"| {_pm(r, 'tps_within_slo', '.1f')} | {_paired(r)} | {_pct_pm(r, 'slo_attainment')} "
            f"| {_fmt(r.mean('tps_within_slo_all_scaled'), '.1f')} / {_pct(r.mean('slo_attainment_all_scaled'), ' ')} "
            f"| {_fmt(r.mean('ttft_p50_s'), '.2f')} / {_fmt(r.mean('ttft_p90_s'), '.2f')} "
            f"| {_fmt(r.mean('tpot_p50_s') * 1000, '.1f')} | {_fmt(r.mean('engine_ttft_mean_s'), '.2f')} "
            f"| {_pct(r.mean('local_hit_ratio'), ' ')} | {_pct(r.mean('usage_hit_ratio'), ' ')} "
            f"| {_fmt(r.mean('router_overhead_ms'), '.1f')} / {_fmt(r.mean('emulator_overhead_ms'), '.1f')} "
            f"| {_fmt(r.mean('cpu_router_ms'), '.1f')} / {_fmt(r.mean('cpu_client_ms'), '.1f')} / "
            f"{_fmt(r.mean('cpu_engines_ms'), '.1f')} | {_pct(r.mean('cpu_box_share'), ' ')} "
            f"| {drift_text(r)} | {_ok_sent(r, ' / ')} |"
        )
    return "\n".join(lines) + "\n"


def summary_markdown(rows: Sequence[Row]) -> str:
    """The table, the per-rate verdicts and what "not sent" means."""
    notes = "".join(f"- {line.strip()}\n" for line in [*verdict_lines(rows), *drift_warnings(rows)])
    first = "".join(f"{line.strip()}  \n" for line in headline(rows))
    return (
        (f"{first}\n" if first else "")
        + rows_markdown(rows)
        + (f"\n{notes}" if notes else "")
        + f"\n{NOT_SENT}\n"
    )


def _paired(row: Row) -> str:
    p = row.paired
    if not p:
        return "-"
    ci = p.get("ci95")
    return f"{p['mean']:+.1f}" + ("" if ci is None else f" ± {ci:.1f}")


def rows_json(rows: Sequence[Row], meta: Mapping[str, Any]) -> bytes:
    doc = {"meta": dict(meta), "results": [row_dict(r) for r in rows], "pooled": pooled(rows)}
    return orjson.dumps(_clean(doc), option=orjson.OPT_INDENT_2)


def write_rows_json(path: Path, rows: Sequence[Row], meta: Mapping[str, Any]) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_bytes(rows_json(rows, meta))
