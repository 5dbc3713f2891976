"""Readable rich tables for :class:`~smetric.trace.stats.TraceStats`."""

from __future__ import annotations

from rich.console import Console
from rich.table import Table

from smetric.trace.stats import Distribution, TraceStats


def _pct(value: float | None) -> str:
    return "n/a" if value is None else f"{100 * value:.1f} %"


def _secs(value: float | None) -> str:
    return "n/a" if value is None else f"{value:,.1f} s"


def _dist(d: Distribution) -> str:
    return f"mean {d.mean:,.0f} | p50 {d.p50:,.0f} | p90 {d.p90:,.0f} | p99 {d.p99:,.0f} | max {d.max:,.0f}"


def stats_table(stats: TraceStats) -> Table:
    table = Table(title=f"{stats.name} ({stats.format})", show_header=True, title_justify="left")
    table.add_column("statistic", style="bold")
    table.add_column("value", overflow="fold")
    row = table.add_row
    row("requests / sessions / families", f"{stats.requests:,} / {stats.sessions:,} / {stats.families:,}")
    if stats.sessions_inferred:
        row("sessions", "inferred (prefix extension), not recorded")
    row(
        "dropped over max context / skipped malformed",
        f"{stats.dropped_over_context} / {stats.skipped_malformed}",
    )
    r = stats.reuse
    if r is None:
        row("reuse", "n/a: the trace has no block hashes")
    else:
        row(
            "block size",
            f"{stats.block_tokens} tokens; {r.total_blocks:,} blocks, {r.distinct_blocks:,} distinct",
        )
        row("ideal reuse (infinite cache, reused / prompt tokens)", _pct(r.ideal_reuse))
        row(
            "intra- / inter-session share of reuse",
            f"{_pct(r.intra_session_share)} / {_pct(r.inter_session_share)}",
        )
        row("intra-family share of reuse (incl. sub-agents)", _pct(r.intra_family_share))
        row("system-prompt share of reuse", _pct(r.system_prompt_share))
        row("first-turn requests' share of reuse", _pct(r.first_turn_reuse_share))
        row(
            "reuse interval p50 / p90 (per reused block)",
            f"{_secs(r.reuse_interval_p50_s)} / {_secs(r.reuse_interval_p90_s)}; "
            f"{_pct(r.reuse_within_100s_share)} within 100 s",
        )
        row("reuse clock", r.reuse_clock)
    row(
        "first-turn share of requests / prompt tokens",
        f"{_pct(stats.first_turn_share)} / {_pct(stats.first_turn_token_share)}",
    )
    row("top 25 % sessions' share of tokens (prompt+output)", _pct(stats.top25_session_token_share))
    row("requests per session", _dist(stats.requests_per_session))
    row("prompt tokens", _dist(stats.prompt_tokens))
    row("output tokens", _dist(stats.output_tokens))
    row("trigger mix", ", ".join(f"{k} {_pct(v)}" for k, v in stats.trigger_mix.items()))
    if stats.think_time_p50_s_by_trigger:
        row(
            "median think time by trigger",
            ", ".join(f"{k} {_secs(v)}" for k, v in stats.think_time_p50_s_by_trigger.items()),
        )
    row("arrival rate", f"{stats.requests_per_s:,.2f} requests/s ({stats.arrival_assumption})")
    if stats.requests_per_min_per_instance is not None:
        row(
            f"requests / min / instance ({stats.instances} instances)",
            f"{stats.requests_per_min_per_instance:,.1f}",
        )
    for note in stats.notes:
        row("note", note)
    return table


# Width used when stdout is not a terminal (pipes, files), so rows are not folded at 80 columns.
PIPE_WIDTH = 130


def print_stats(stats: TraceStats, console: Console | None = None) -> None:
    if console is None:
        console = Console()
        if not console.is_terminal:
            console = Console(width=PIPE_WIDTH)
    console.print(stats_table(stats))
