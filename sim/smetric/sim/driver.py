"""``smetric simulate`` end to end once the arguments are parsed: executor, progress bar,
streaming sidecar and ``--resume``, the seed summary, tables, the JSON document and the figures.

The JSON document depends only on the sweep (config, trace, rows in canonical order, summary):
no wall-clock, worker count or cluster address, so a sweep is byte-identical whichever executor
ran it. Wall times are in the sidecar (``OUT.runs.jsonl``) and on the progress bar.
"""

from __future__ import annotations

import json
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path
from typing import Any

from rich.console import Console
from rich.progress import BarColumn, MofNCompleteColumn, Progress, TextColumn, TimeElapsedColumn

from smetric.core.presets import get_preset
from smetric.sim.executors import make_executor
from smetric.sim.metrics import MAX_ARRIVAL_DRIFT
from smetric.sim.regimes import Regime, map_cells, plot_map
from smetric.sim.report import (
    headline_path,
    map_table,
    mean_rows,
    plot,
    plot_headline,
    results_table,
    summary_table,
)
from smetric.sim.stats import summary
from smetric.sim.stream import Sidecar, code_digest, fingerprint, sidecar_path, write_atomic
from smetric.sim.sweep import RunCost, RunKey, RunTask, Setting, SweepSpec, json_ready, prepared, run_sweep
from smetric.sim.workload import PreparedWorkload, max_request_tokens


def setting_doc(s: Setting) -> dict[str, Any]:
    """Every field of the run config (so the fingerprint covers every knob) and what it resolves to."""
    sim = s.sim
    preset = get_preset(sim.preset_name)
    fields = {k: v for k, v in asdict(sim).items() if k != "seed"}
    return {
        "shared_system_prompt": s.workload.share_system_prompt,
        "subsample": s.workload.subsample,
        **fields,
        "preset_variant": sim.preset_name,
        "tp_gpus": preset.n_gpus,
        "gpu_name": preset.gpu.name,
        "hbm_gb_per_gpu": preset.gpu.hbm_gb,
        "max_request_tokens": max_request_tokens(preset),
        "decode_simulated": sim.mode == "colocated",
    }


def config_doc(spec: SweepSpec, regimes: Sequence[Regime]) -> dict[str, Any]:
    common = {
        "trace": spec.workload.trace_path,
        "policies": list(spec.policies),
        "rates": list(spec.multipliers),
        "seeds": list(spec.seeds),
        "base_families_per_s": spec.base_families_per_s,
        "base_families_per_s_per_32_instances": spec.base_families_per_s_per_32,
        "headline": spec.headline,
        "extend_past_knee": spec.extend_past_knee,
        "knee_drop": spec.knee_drop,
        "max_extensions": spec.max_extensions,
    }
    if not regimes:
        return {**setting_doc(spec.settings[0]), **common}
    return {
        **common,
        "regimes": [
            {**asdict(r), "config": setting_doc(s)} for r, s in zip(regimes, spec.settings, strict=True)
        ],
    }


def run_and_write(
    spec: SweepSpec,
    *,
    console: Console,
    json_path: Path | None,
    plot_path: Path | None,
    workers: int | None,
    cluster: str | None,
    resume: bool,
    regimes: Sequence[Regime] = (),
) -> int:
    work = prepared(spec.workload)
    console.print(intro_line(spec, work, regimes))
    config = json_ready(config_doc(spec, regimes))
    rows = run_with_progress(
        spec, config, console=console, json_path=json_path, workers=workers, cluster=cluster, resume=resume
    )
    doc: dict[str, Any] = {"config": config, "trace": trace_doc(work), "results": rows}
    title = summarise_and_print(doc, rows, spec, work, regimes)
    warn_drift(console, rows)
    doc = json_ready(doc)  # type: ignore[assignment]
    write_outputs(doc, rows, spec, regimes, title, console=console, json_path=json_path, plot_path=plot_path)
    return 0


def intro_line(spec: SweepSpec, work: PreparedWorkload, regimes: Sequence[Regime]) -> str:
    """The one line that names the trace, the cluster and the sweep before it runs."""
    sim = spec.sim
    return (
        f"trace {work.trace_name}: {len(work)} requests, {work.n_families} families, "
        f"{work.n_dropped} over the {work.max_tokens}-token limit (dropped); {sim.instances} x "
        f"{sim.preset_name}, {sim.mode}, global tier {sim.global_tier}; base rate "
        f"{spec.base_families_per_s:.4f} families/s; seeds {','.join(map(str, spec.seeds))}"
        + (f"; {len(spec.settings)} regimes" if regimes else "")
    )


def run_with_progress(
    spec: SweepSpec,
    config: object,
    *,
    console: Console,
    json_path: Path | None,
    workers: int | None,
    cluster: str | None,
    resume: bool,
) -> list[dict[str, Any]]:
    """Run the sweep on the chosen executor behind a progress bar, streaming each finished run
    to the sidecar (and, with ``resume``, skipping the runs the sidecar already holds)."""
    done: dict[RunKey, dict[str, Any]] = {}
    sidecar: Sidecar | None = None
    if json_path is not None:  # only a sidecar needs the fingerprint (and reads the sources for it)
        fp = fingerprint({"config": config, "code": code_digest()})
        side = sidecar_path(json_path)
        sidecar = Sidecar(side, fp, resume)  # locks the file first: one sweep writes a sidecar
        done = sidecar.done
        if resume:
            console.print(f"resume: {len(done)} runs found in {side}")
    executor = make_executor(
        workers, cluster, max(1, len(spec.grid()) - len(done)), [s.workload.trace_path for s in spec.settings]
    )
    try:
        with Progress(
            TextColumn("[bold]simulate"),
            BarColumn(),
            MofNCompleteColumn(),
            TimeElapsedColumn(),
            TextColumn("{task.description}"),
            console=console,
            transient=False,
        ) as prog:
            bar = prog.add_task("", total=0)

            def grow(n: int) -> None:
                total = prog.tasks[0].total or 0
                prog.update(bar, total=total + n)

            def finished(task: RunTask, row: dict[str, Any], cost: RunCost) -> None:
                if sidecar is not None:
                    sidecar.add(task.key, row, cost)
                k = task.key
                where = f"{k.regime} " if k.regime else ""
                prog.update(
                    bar,
                    advance=1,
                    description=f"{where}{k.policy} seed {k.seed} @ {k.rate_multiplier:g}x ({cost.wall_s:.1f} s)",
                )

            return run_sweep(spec, executor, done, finished, grow)
    finally:
        executor.close()
        if sidecar is not None:
            sidecar.close()


def trace_doc(work: PreparedWorkload) -> dict[str, Any]:
    """The JSON document's ``trace`` section: what the prepared trace holds and what was dropped."""
    return {
        "name": work.trace_name,
        "requests": len(work),
        "families": work.n_families,
        "requests_over_limit_dropped": work.n_dropped,
        "max_request_tokens": work.max_tokens,
        "notes": list(work.notes),
    }


def summarise_and_print(
    doc: dict[str, Any],
    rows: list[dict[str, Any]],
    spec: SweepSpec,
    work: PreparedWorkload,
    regimes: Sequence[Regime],
) -> str:
    """Add the seed summary (and, for a regime map, the map's cells) to ``doc``, print the tables
    to stdout and return the figures' title."""
    sim = spec.sim
    out = Console()
    if not out.is_terminal:
        out = Console(width=170)
    seeds = ",".join(map(str, spec.seeds))
    if regimes:
        summaries = {
            s.name: summary(
                [r for r in rows if r.get("regime") == s.name], spec.headline, spec.policies, spec.knee_drop
            )
            for s in spec.settings
        }
        cells = map_cells(summaries)
        doc["summary"] = [{"regime": k, "policies": v} for k, v in summaries.items()]
        doc["regime_map"] = cells
        title = f"regime map: {sim.instances} x {sim.preset}, {sim.mode}, seeds {seeds}"
        out.print(map_table(cells, title))
        return title
    title = (
        f"{work.trace_name}: {sim.instances} x {sim.preset_name}, {sim.mode}, global tier {sim.global_tier}, "
        f"base {spec.base_families_per_s:.4f} families/s, seeds {seeds}"
    )
    summ = summary(rows, spec.headline, spec.policies, spec.knee_drop)
    doc["summary"] = summ
    shown = rows if len(spec.seeds) == 1 else mean_rows(rows)
    out.print(results_table(shown, sim.mode, title + ("" if len(spec.seeds) == 1 else " (mean over seeds)")))
    out.print(summary_table(summ, f"peak {spec.headline} over seeds (mean ± 95 % CI) and paired margins"))
    return title


def warn_drift(console: Console, rows: list[dict[str, Any]]) -> None:
    """Warn about runs whose arrivals drifted past ``MAX_ARRIVAL_DRIFT`` (the first eight named)."""
    drifting = [r for r in rows if r.get("arrival_drift_ok") is False]
    if not drifting:
        return
    shown_runs = ", ".join(
        f"{r.get('regime', '') + ' ' if r.get('regime') else ''}{r['policy']} seed {r['seed']} "
        f"@ {r['rate_multiplier']:g}x ({100 * r['arrival_drift']:+.0f} %)"
        for r in drifting[:8]
    )
    console.print(
        f"[yellow]warning: {len(drifting)} of {len(rows)} runs drifted by more than "
        f"{100 * MAX_ARRIVAL_DRIFT:.0f} % (requests sent in the window's last quarter vs its first; "
        f"arrival_drift_ok false in the JSON): {shown_runs}{' ...' if len(drifting) > 8 else ''}[/yellow]"
    )


def write_outputs(
    doc: dict[str, Any],
    rows: list[dict[str, Any]],
    spec: SweepSpec,
    regimes: Sequence[Regime],
    title: str,
    *,
    console: Console,
    json_path: Path | None,
    plot_path: Path | None,
) -> None:
    """Write the JSON document (atomically) and the figures, each where asked."""
    if json_path is not None:
        write_atomic(json_path, json.dumps(doc, indent=1, allow_nan=False))
        console.print(f"wrote {json_path} (runs streamed to {sidecar_path(json_path)})")
    if plot_path is None:
        return
    if regimes:
        plot_map(doc["regime_map"], list(spec.policies), plot_path, title)
    else:
        plot(mean_rows(rows), spec.sim.mode, plot_path, title)
        headline = headline_path(plot_path)
        plot_headline(rows, spec.sim.mode, headline, title)
        console.print(f"wrote {headline}")
    console.print(f"wrote {plot_path}")
