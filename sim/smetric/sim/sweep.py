"""Parallel sweeps over (policy, rate multiplier): one process per core, the trace loaded once
per worker process (cached by :func:`prepared`), every run deterministic for its seed.

Base rate: :data:`BASE_FAMILIES_PER_S_PER_32` session families per second for a 32-instance
cluster, scaled linearly with the instance count (a multiplier means the same per-instance load
at every cluster size). For the agentic trace on ``qwen3-30b-h20`` (32 instances, global tier
full) 1x offers about 0.9 requests/s (light load), every policy peaks at 6x (3.6-4.6
requests/s) and 10x is well past saturation; each run reports absolute families/s and
requests/s.
"""

from __future__ import annotations

import os
from collections.abc import Callable
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

from smetric.core.presets import get_preset
from smetric.sim.simulator import RunResult, SimConfig, simulate
from smetric.sim.workload import PreparedWorkload, prepare
from smetric.trace import load_agentic, subsample_families
from smetric.trace.formats import detect_format, load_trace

BASE_FAMILIES_PER_S_PER_32 = 0.02


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """Which trace, how it is loaded, and for which preset it is prepared (hashable cache key)."""

    trace_path: str
    preset: str = "qwen3-30b-h20"
    share_system_prompt: bool = True
    subsample: float | None = None
    seed: int = 0


@dataclass(frozen=True, slots=True)
class SweepSpec:
    workload: WorkloadSpec
    sim: SimConfig
    policies: tuple[str, ...]
    multipliers: tuple[float, ...]
    base_families_per_s_per_32: float = BASE_FAMILIES_PER_S_PER_32

    @property
    def base_families_per_s(self) -> float:
        return self.base_families_per_s_per_32 * self.sim.instances / 32.0


@lru_cache(maxsize=2)
def prepared(spec: WorkloadSpec) -> PreparedWorkload:
    """Load and prepare a trace once per process."""
    path = Path(spec.trace_path)
    if not path.exists():
        raise FileNotFoundError(f"trace not found: {path} (set --trace or $SMETRIC_TRACES)")
    if detect_format(path) == "agentic":
        trace = load_agentic(path, share_system_prompt=spec.share_system_prompt)
    else:  # other formats share their system-prompt blocks already (or have no hashes)
        trace = load_trace(path)
    if spec.subsample is not None and spec.subsample < 1.0:
        trace = subsample_families(trace, spec.subsample, spec.seed)
    return prepare(trace, get_preset(spec.preset))


def _run_one(spec: SweepSpec, policy: str, multiplier: float) -> RunResult:
    work = prepared(spec.workload)
    return simulate(work, policy, spec.base_families_per_s * multiplier, spec.sim, rate_multiplier=multiplier)


def run_sweep(
    spec: SweepSpec,
    workers: int | None = None,
    on_result: Callable[[RunResult], None] | None = None,
) -> list[RunResult]:
    """All (policy, multiplier) runs; results in (policy, multiplier) order of the spec."""
    tasks = [(p, m) for p in spec.policies for m in spec.multipliers]
    n_workers = max(1, min(workers or os.cpu_count() or 1, len(tasks)))
    results: dict[tuple[str, float], RunResult] = {}
    if n_workers == 1:
        for p, m in tasks:
            r = _run_one(spec, p, m)
            results[(p, m)] = r
            if on_result is not None:
                on_result(r)
    else:
        # heaviest (highest rate) first, so the pool does not end on one long run
        order = sorted(tasks, key=lambda t: -t[1])
        with ProcessPoolExecutor(max_workers=n_workers) as pool:
            pending: dict[Future[RunResult], tuple[str, float]] = {
                pool.submit(_run_one, spec, p, m): (p, m) for p, m in order
            }
            while pending:
                done, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in done:
                    key = pending.pop(fut)
                    r = fut.result()
                    results[key] = r
                    if on_result is not None:
                        on_result(r)
    return [results[t] for t in tasks]
