"""``python -m smetric.bench.latency.restart [--runs N]``: a single picker's restart window, measured.

The chaos stack (real Envoy, the real ``smetric epp`` process, emulated engines) with one picker;
a client sends a small streaming chat request every 20 ms (up to 8 in flight). Per run: SIGTERM the
picker, wait for its exit, start it again with the same flags and wait for its gRPC health to
report SERVING. Printed per run (seconds from the SIGTERM): the exit, the new process started,
health SERVING, the first and last failed request, and the failures by status. Envoy routes to no
other picker (there is none): every request sent between the old picker's drain and the new one's
listen fails (FailClose 500), so the window is the process's own stop + start.
"""

from __future__ import annotations

import argparse
import asyncio
import sys
import tempfile
import time
from dataclasses import dataclass, field
from pathlib import Path

from smetric.bench.chaos.guards import Guard
from smetric.bench.chaos.stack import ChaosSettings, ChaosStack, HostileEngine, chat
from smetric.bench.procs import Supervisor, stopped
from smetric.bench.stacks import wait_grpc_serving
from smetric.core.stopping import Interrupted, run_until_signalled

INTERVAL_S = 0.02
MAX_IN_FLIGHT = 8


@dataclass
class Timeline:
    sent: list[tuple[float, float, int]] = field(default_factory=list)  # (sent, done, status)


async def _client(st: ChaosStack, stop: asyncio.Event, tl: Timeline) -> None:
    gate = asyncio.Semaphore(MAX_IN_FLIGHT)
    tasks: set[asyncio.Task[None]] = set()
    i = 0

    async def one(n: int) -> None:
        async with gate:
            t0 = time.monotonic()
            r = await st.post(chat(f"restart-{n % 40}", 0, max_tokens=2), timeout_s=30)
            tl.sent.append((t0, time.monotonic(), r.status if not r.error else 0))

    while not stop.is_set():
        task = asyncio.create_task(one(i))
        tasks.add(task)
        task.add_done_callback(tasks.discard)
        i += 1
        await asyncio.sleep(INTERVAL_S)
    await asyncio.gather(*tasks)


async def one_run(st: ChaosStack) -> dict[str, float]:
    tl = Timeline()
    stop = asyncio.Event()
    client = asyncio.create_task(_client(st, stop, tl))
    await asyncio.sleep(2.0)
    t_term = time.monotonic()
    await st.sup.stop("picker")  # SIGTERM, then wait for the exit
    t_exit = time.monotonic()
    await st.sup.start("picker", st.picker_argv, env={"PYTHONHASHSEED": "0"})
    t_started = time.monotonic()
    await wait_grpc_serving(st.health_target, st.sup, 60.0, "picker")
    t_ready = time.monotonic()
    await asyncio.sleep(2.0)
    stop.set()
    await client
    failed = [(s, d, c) for s, d, c in tl.sent if c != 200]
    by_status: dict[str, float] = {}
    for _, _, c in failed:
        by_status[f"status_{c}"] = by_status.get(f"status_{c}", 0) + 1
    return {
        "exit_s": t_exit - t_term,
        "started_s": t_started - t_term,
        "ready_s": t_ready - t_term,
        "first_failure_s": min((s for s, _, _ in failed), default=t_term) - t_term,
        "last_failure_s": max((d for _, d, _ in failed), default=t_term) - t_term,
        "requests": float(len(tl.sent)),
        "failed": float(len(failed)),
        **by_status,
    }


async def main_async(runs: int) -> int:
    with tempfile.TemporaryDirectory(prefix="picker-restart-") as tmp:
        work = Path(tmp)
        settings = ChaosSettings(guards_off=tuple[Guard, ...]())
        async with Supervisor(work / "logs") as sup:
            st = ChaosStack(sup, work, settings, HostileEngine())
            try:
                await st.start()
                for k in range(runs):
                    r = await one_run(st)
                    print(f"run {k + 1}: " + ", ".join(f"{n} {v:.2f}" for n, v in r.items()), flush=True)
            finally:
                await st.stop()
    return 0


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--runs", type=int, default=3)
    a = p.parse_args(argv)
    try:
        return run_until_signalled(main_async(a.runs))
    except Interrupted as exc:  # SIGTERM / SIGINT: the stack was stopped
        return stopped("python -m smetric.bench.latency.restart", exc)


if __name__ == "__main__":
    sys.exit(main())
