"""Sweeps over (setting, policy, seed, rate multiplier): the runs, their order, and the adaptive
extension of each curve past its knee.

A *run* is one deterministic simulation, named by a :class:`RunKey` (regime, policy, seed, rate
multiplier); its result is a JSON-ready row (:func:`run_task`) that depends on nothing but the
task -- no wall-clock fields, so the same seeds give byte-identical JSON whichever executor ran
them (local pool, one process, or a Dask cluster: :mod:`smetric.sim.executors`). Wall times are
returned beside the row and go to the streaming sidecar only (:mod:`smetric.sim.stream`).

Base rate: :data:`BASE_FAMILIES_PER_S_PER_32` session families per second for a 32-instance
cluster, scaled linearly with the instance count (a multiplier means the same per-instance load
at every cluster size). Each run reports absolute families/s and requests/s.

Past the knee: after the rate grid, every (setting, policy, seed) curve whose highest-rate point
is not yet ``knee_drop`` (default 20 %) below its peak gets another rate, ``last + step`` with
``step = max(last grid gap, 25 % of last)``, until it is, or after ``max_extensions`` extra rates
(the summary's ``past_knee_per_seed`` says which curves got there). A curve whose peak is its
lowest rate (the grid starts past the knee, e.g. without a global tier) gets ``0.6 x`` that rate
instead, so every reported peak has a lower rate beside it (same limit on extra rates).
"""

from __future__ import annotations

import math
import time
from collections.abc import Callable, Iterable
from dataclasses import dataclass, field, replace
from functools import lru_cache
from pathlib import Path
from typing import Any, Protocol

from smetric.core.presets import get_preset
from smetric.sim.config import SimConfig
from smetric.sim.simulator import simulate
from smetric.sim.stats import past_knee, peaks
from smetric.sim.workload import PreparedWorkload, prepare
from smetric.trace import load_agentic, subsample_families
from smetric.trace.formats import detect_format, load_trace

BASE_FAMILIES_PER_S_PER_32 = 0.02
KNEE_DROP = 0.2
MAX_EXTENSIONS = 6


@dataclass(frozen=True, slots=True)
class WorkloadSpec:
    """Which trace, how it is loaded, and for which preset it is prepared (hashable cache key)."""

    trace_path: str
    preset: str = "qwen3-30b-h20"
    share_system_prompt: bool = True
    subsample: float | None = None
    seed: int = 0


@dataclass(frozen=True, slots=True)
class Setting:
    """One cluster configuration of a sweep (a regime of the regime map; ``name`` "" otherwise)."""

    name: str
    workload: WorkloadSpec
    sim: SimConfig


@dataclass(frozen=True, slots=True)
class RunKey:
    regime: str
    policy: str
    seed: int
    rate_multiplier: float

    def as_list(self) -> list[object]:
        return [self.regime, self.policy, self.seed, self.rate_multiplier]


@dataclass(frozen=True, slots=True)
class RunTask:
    key: RunKey
    workload: WorkloadSpec
    sim: SimConfig  # seed already set to key.seed
    families_per_s: float


@dataclass(frozen=True, slots=True)
class SweepSpec:
    settings: tuple[Setting, ...]
    policies: tuple[str, ...]
    multipliers: tuple[float, ...]
    base_families_per_s_per_32: float = BASE_FAMILIES_PER_S_PER_32
    seeds: tuple[int, ...] = (0,)
    extend_past_knee: bool = True
    knee_drop: float = KNEE_DROP
    max_extensions: int = MAX_EXTENSIONS
    headline: str = "tps_within_slo"
    extra: dict[str, Any] = field(default_factory=dict, compare=False, hash=False)

    def __post_init__(self) -> None:
        if not self.settings or not self.policies or not self.multipliers or not self.seeds:
            raise ValueError("a sweep needs settings, policies, rates and seeds")
        if not 0 < self.knee_drop < 1:
            raise ValueError("knee_drop must be in (0, 1)")

    @property
    def workload(self) -> WorkloadSpec:
        return self.settings[0].workload

    @property
    def sim(self) -> SimConfig:
        return self.settings[0].sim

    def families_per_s(self, setting: Setting, multiplier: float) -> float:
        return self.base_families_per_s_per_32 * setting.sim.instances / 32.0 * multiplier

    @property
    def base_families_per_s(self) -> float:
        return self.base_families_per_s_per_32 * self.sim.instances / 32.0

    def task(self, setting: Setting, policy: str, seed: int, multiplier: float) -> RunTask:
        return RunTask(
            RunKey(setting.name, policy, seed, multiplier),
            setting.workload,
            replace(setting.sim, seed=seed),
            self.families_per_s(setting, multiplier),
        )

    def grid(self) -> list[RunTask]:
        """The first round: every (setting, policy, seed, grid rate)."""
        return [
            self.task(s, p, seed, m)
            for s in self.settings
            for p in self.policies
            for seed in self.seeds
            for m in self.multipliers
        ]

    def order(self, key: RunKey) -> tuple[int, int, int, float]:
        """Canonical row order: setting, policy (as given), seed, rate."""
        names = [s.name for s in self.settings]
        return (names.index(key.regime), self.policies.index(key.policy), self.seeds.index(key.seed),
                key.rate_multiplier)  # fmt: skip


@lru_cache(maxsize=4)
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


def json_ready(x: object) -> object:
    """JSON has no NaN/inf: undefined metrics (e.g. TPOT in disaggregated mode) become null."""
    if isinstance(x, float):
        return x if math.isfinite(x) else None
    if isinstance(x, dict):
        return {k: json_ready(v) for k, v in x.items()}
    if isinstance(x, list | tuple):
        return [json_ready(v) for v in x]
    return x


@dataclass(frozen=True, slots=True)
class RunCost:
    """What a run cost where it ran (sidecar and progress only; never in the row)."""

    wall_s: float
    cpu_s: float  # process CPU time: the unloaded wall time on a busy machine


def run_task(task: RunTask) -> tuple[dict[str, Any], RunCost]:
    """Simulate one run: ``(row, cost)``; the row has no wall-clock field."""
    wall0, cpu0 = time.perf_counter(), time.process_time()
    work = prepared(task.workload)
    k = task.key
    res = simulate(work, k.policy, task.families_per_s, task.sim, rate_multiplier=k.rate_multiplier)
    row = res.to_dict()
    row.pop("sim_wall_s", None)
    row.pop("events_per_s", None)
    head: dict[str, Any] = {"regime": k.regime} if k.regime else {}
    head.update(policy=k.policy, seed=k.seed)
    out = json_ready({**head, **row})
    assert isinstance(out, dict)
    return out, RunCost(time.perf_counter() - wall0, time.process_time() - cpu0)


class Executor(Protocol):
    """Runs tasks; yields ``(task, row, cost)`` as each finishes (any order)."""

    def run(self, tasks: list[RunTask]) -> Iterable[tuple[RunTask, dict[str, Any], RunCost]]: ...

    def close(self) -> None: ...


def extensions(spec: SweepSpec, done: dict[RunKey, dict[str, Any]]) -> list[RunTask]:
    """Next rates for every curve not yet ``knee_drop`` below its peak (see the module docstring)."""
    if not spec.extend_past_knee:
        return []
    grid = sorted(spec.multipliers)
    gap = grid[-1] - grid[-2] if len(grid) > 1 else grid[-1]
    out: list[RunTask] = []
    for s in spec.settings:
        for p in spec.policies:
            for seed in spec.seeds:
                curve = [r for k, r in done.items() if (k.regime, k.policy, k.seed) == (s.name, p, seed)]
                rates = sorted(float(r["rate_multiplier"]) for r in curve)
                n_extra = sum(1 for m in rates if m > grid[-1] or m < grid[0])
                if not curve or n_extra >= spec.max_extensions:
                    continue
                peak = peaks(curve, spec.headline).get((p, seed))
                if peak is not None and float(peak["rate_multiplier"]) == rates[0] and len(rates) > 1:
                    out.append(spec.task(s, p, seed, round(0.6 * rates[0], 6)))
                elif not past_knee(curve, spec.headline, spec.knee_drop):
                    last = rates[-1]
                    out.append(spec.task(s, p, seed, round(last + max(gap, 0.25 * last), 6)))
    return out


def run_sweep(
    spec: SweepSpec,
    executor: Executor,
    done: dict[RunKey, dict[str, Any]] | None = None,
    on_result: Callable[[RunTask, dict[str, Any], RunCost], None] | None = None,
    on_new_tasks: Callable[[int], None] | None = None,
) -> list[dict[str, Any]]:
    """The grid, then extension rounds past each knee; rows in :meth:`SweepSpec.order`.

    ``done``: rows already computed (``--resume``), skipped. ``on_result`` sees each new row;
    ``on_new_tasks(n)`` is told how many runs a round adds (for a progress bar)."""
    rows: dict[RunKey, dict[str, Any]] = dict(done or {})
    todo = [t for t in spec.grid() if t.key not in rows]
    while True:
        if on_new_tasks is not None:
            on_new_tasks(len(todo))
        # heaviest (highest rate) first, so a pool does not end on one long run
        todo.sort(key=lambda t: (-t.key.rate_multiplier, spec.order(t.key)))
        for task, row, cost in executor.run(todo):
            rows[task.key] = row
            if on_result is not None:
                on_result(task, row, cost)
        todo = [t for t in extensions(spec, rows) if t.key not in rows]
        if not todo:
            break
    names = {s.name for s in spec.settings}
    keep = [k for k in rows if k.regime in names and k.policy in spec.policies and k.seed in spec.seeds]
    return [rows[k] for k in sorted(keep, key=spec.order)]
