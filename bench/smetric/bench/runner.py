"""One bench row: fresh cluster (cold caches) + a front end, replay, scrape, summarise, tear down.

With a warm-up the replay runs ``warmup_s + duration_s`` model seconds and the row summarises the
requests sent after the warm-up: the engines' counters are read when it ends, the load samples
taken before it are left out."""

from __future__ import annotations

import asyncio
import contextlib
import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path

import aiohttp

from smetric.bench.client import Api, make_client
from smetric.bench.cpu import CpuSnapshot, CpuUse
from smetric.bench.metrics import summarise
from smetric.bench.plan import AgentPlan, ReplayPlan
from smetric.bench.procs import BenchError, Supervisor
from smetric.bench.promtext import EngineScrape, counter_delta
from smetric.bench.replay import ClosedLoopReplay, ReplayResult, RequestRecord, SendSpec
from smetric.bench.report import PolicyResult
from smetric.bench.sampler import LoadSampler, scrape_all
from smetric.bench.stacks import Cluster, ClusterSpec, Frontend, FrontendUrls, start_cluster
from smetric.bench.synth import TokenCount
from smetric.core.slo import SloConfig


@dataclass(frozen=True, slots=True)
class RunSettings:
    cluster: ClusterSpec
    slo: SloConfig
    duration_s: float  # model seconds of the replay window (0 = until the plan ends)
    drain_timeout_s: float  # wall seconds allowed after the window for in-flight requests
    seed: int
    shared_system_prompt: bool
    window_s: float  # imbalance window, model seconds
    sample_interval_s: float = 0.5
    api: Api = "chat"  # the wire API of the replayed traffic: OpenAI chat or Anthropic Messages
    warmup_s: float = 0.0  # model seconds replayed before the measured window (not summarised)

    @property
    def measured_s(self) -> tuple[float, float] | None:
        """The measured window in model seconds since the replay's start (None: no fixed window)."""
        if self.duration_s <= 0:
            return None
        return self.warmup_s, self.warmup_s + self.duration_s


async def _watch(sup: Supervisor, interval_s: float = 1.0) -> None:
    """Raise as soon as a supervised process dies (turns a crash into a clear failure)."""
    while True:
        sup.check_alive()
        await asyncio.sleep(interval_s)


async def run_row(
    frontend: Frontend,
    plan: ReplayPlan | AgentPlan,
    settings: RunSettings,
    count: TokenCount,
    log_dir: Path,
    on_record: Callable[[RequestRecord], None] | None = None,
    on_phase: Callable[[str], None] | None = None,
    on_send: Callable[[SendSpec], None] | None = None,
    start_lock: asyncio.Lock | None = None,
    side_by_side: int = 1,
) -> PolicyResult:
    """Run one row; a :class:`BenchError` becomes a ``failed`` row, anything else propagates.

    Rows run side by side (``side_by_side`` of them in this process) share ``start_lock``: each
    starts its cluster and router holding it, so two rows never pick the same free ports (they
    are free when checked, not reserved), and each counts ``1 / side_by_side`` of the client
    process's CPU."""

    def phase(text: str) -> None:
        if on_phase is not None:
            on_phase(text)

    row_dir = log_dir / frontend.label.replace(":", "-")
    try:
        async with Supervisor(row_dir) as sup:
            cluster, urls = await start_stack(sup, frontend, settings.cluster, row_dir, phase, start_lock)
            timeout = aiohttp.ClientTimeout(total=5.0)
            warmup_wall_s = settings.warmup_s * settings.cluster.time_scale
            if warmup_wall_s <= 0:
                async with aiohttp.ClientSession(timeout=timeout) as http:
                    before = await scrape_all(http, cluster.base_urls)
            phase("replaying")
            cpu_start, wall_start = CpuSnapshot.take(_pids(sup)), time.monotonic()
            async with (
                make_client(
                    settings.api,
                    urls.base_url,
                    settings.cluster.model,
                    time_scale=settings.cluster.time_scale,
                ) as client,
                LoadSampler(cluster.base_urls, settings.sample_interval_s) as sampler,
            ):
                at_warmup_end = (
                    asyncio.create_task(_scrape_later(cluster.base_urls, warmup_wall_s, timeout))
                    if warmup_wall_s > 0
                    else None
                )
                replay = ClosedLoopReplay(
                    plan,
                    send=client.send,
                    count=count,
                    time_scale=settings.cluster.time_scale,
                    duration_s=settings.duration_s + settings.warmup_s if settings.duration_s > 0 else 0.0,
                    seed=settings.seed,
                    shared_system_prompt=settings.shared_system_prompt,
                    on_record=on_record,
                    drain_s=settings.drain_timeout_s,
                    on_send=on_send,
                )
                try:
                    result = await _unless_a_process_dies(replay, sup)
                    if at_warmup_end is not None:
                        before = await at_warmup_end
                finally:
                    if at_warmup_end is not None:
                        at_warmup_end.cancel()
                cpu = CpuUse.between(cpu_start, CpuSnapshot.take(_pids(sup)), len(result.records),
                                     time.monotonic() - wall_start, client_share=1.0 / max(side_by_side, 1))  # fmt: skip
                if client.in_flight:  # requests cut at the drain deadline: say where they were stuck
                    lines = [f"{rid}: {state}" for rid, state in sorted(client.in_flight.items())]
                    (row_dir / "stuck-requests.txt").write_text("\n".join(lines) + "\n")
            async with aiohttp.ClientSession(timeout=timeout) as http:
                after = await scrape_all(http, cluster.base_urls)
                await _save_text(http, urls.metrics_url, row_dir / "router-metrics.txt")
            phase("stopping")
    except BenchError as exc:
        return PolicyResult(frontend.label, frontend.router, frontend.policy, "failed", str(exc))
    summary = summarise(
        result.records,
        result.not_sent,
        settings.slo,
        settings.cluster.time_scale,
        [x for x in sampler.samples if x.t_s >= warmup_wall_s],
        counter_delta(before, after),
        settings.window_s,
        sum(a.running + a.waiting for a in after.values()),
        settings.cluster.token_cost_scale,
        settings.measured_s,
    )
    summary = dataclasses.replace(
        summary, cpu_router_ms=cpu.router_ms_per_request, cpu_client_ms=cpu.client_ms_per_request,
        cpu_engines_ms=cpu.engines_ms_per_request, cpu_box_share=cpu.box_share,
    )  # fmt: skip
    note = "" if summary.n_failed == 0 else _first_error(result.records)
    return PolicyResult(frontend.label, frontend.router, frontend.policy, "ok", note, summary)


async def start_stack(
    sup: Supervisor,
    frontend: Frontend,
    spec: ClusterSpec,
    row_dir: Path,
    phase: Callable[[str], None],
    start_lock: asyncio.Lock | None,
) -> tuple[Cluster, FrontendUrls]:
    """Start the emulated cluster, then the front end, holding ``start_lock`` (rows side by side
    would otherwise both take the first free port range: it is checked, not reserved, until the
    processes bind it, which each start waits for)."""
    async with start_lock if start_lock is not None else contextlib.nullcontext():
        phase("starting emulator")
        cluster = await start_cluster(sup, spec)
        phase(f"starting {frontend.router}")
        urls = await frontend.start(sup, cluster, spec, row_dir)
    return cluster, urls


def _pids(sup: Supervisor) -> dict[str, int]:
    return {name: child.pid for name, child in sup.children.items()}


async def _scrape_later(
    base_urls: tuple[str, ...] | list[str], delay_s: float, timeout: aiohttp.ClientTimeout
) -> dict[str, EngineScrape]:
    """The engines' counters ``delay_s`` wall seconds from now (the end of the warm-up)."""
    await asyncio.sleep(delay_s)
    async with aiohttp.ClientSession(timeout=timeout) as http:
        return await scrape_all(http, base_urls)


async def _unless_a_process_dies(replay: ClosedLoopReplay, sup: Supervisor) -> ReplayResult:
    """Run the replay; if a supervised process dies first, cancel it and raise that failure."""
    task = asyncio.create_task(replay.run())
    watcher = asyncio.create_task(_watch(sup))
    try:
        done, _ = await asyncio.wait({task, watcher}, return_when=asyncio.FIRST_COMPLETED)
        if task in done:
            return task.result()
        watcher.result()  # raises the BenchError naming the dead process
        raise BenchError("process watcher stopped unexpectedly")
    finally:
        for t in (task, watcher):
            t.cancel()
        await asyncio.gather(task, watcher, return_exceptions=True)


async def _save_text(http: aiohttp.ClientSession, url: str, path: Path) -> None:
    """Keep the router's own metrics of the row (decision counts, kv_aware lookups) for later reading."""
    try:
        async with http.get(url) as resp:
            path.write_bytes(await resp.read())
    except (aiohttp.ClientError, TimeoutError) as exc:
        path.write_text(f"could not read {url}: {type(exc).__name__}\n")


def _first_error(records: tuple[RequestRecord, ...]) -> str:
    for r in records:
        if not r.outcome.ok:
            o = r.outcome
            return f"{sum(1 for x in records if not x.outcome.ok)} failed; first: HTTP {o.status} {o.error}"[
                :300
            ]
    return ""
