"""Chaos fault of a frozen engine (SIGSTOP: the kernel still accepts its connections, nothing
answers). The picker stops choosing it once its scrapes go stale (``--staleness-threshold-ms``), so
only the requests sent before that reach it; those, and the streams it was serving, end with an
error at the gateway's stream idle timeout (300 s by default, above the longest prefill; scaled
to 20 s here)."""

from __future__ import annotations

import asyncio
import signal
import time

from smetric.bench.chaos_guards import IDLE_TIMEOUT, STALENESS
from smetric.bench.chaos_row import Row
from smetric.bench.chaos_stack import ChaosStack, Reply, chat

WAVE = 9


async def _wave(st: ChaosStack, tag: str, timeout_s: float) -> list[Reply]:
    return await asyncio.gather(
        *(st.post(chat(f"{tag}-{time.monotonic_ns()}-{n}", 0), timeout_s=timeout_s) for n in range(WAVE))
    )


async def endpoint_stop(st: ChaosStack, quick: bool) -> list[Row]:
    idle = st.settings.stream_idle_timeout_s
    stale_s = 2.5  # the picker's 2 s staleness threshold, plus a scrape interval
    victim, long_req = await st.long_stream("stop", idle + 10.0)
    address = st.endpoints[int(victim.removeprefix("engine"))]
    st.signal(victim, signal.SIGSTOP)
    t_stop = time.monotonic()
    try:
        first = asyncio.create_task(_wave(st, "stop-at-once", idle + 10.0))  # it is still fresh
        await asyncio.sleep(stale_s)
        later = await _wave(st, "stop-stale", idle + 10.0)
        hung = await long_req
        cut_after = time.monotonic() - t_stop
        at_once = await first
    finally:
        st.signal(victim, signal.SIGCONT)
    await st.wait_fresh()
    frozen = [r for r in at_once if r.served == address]
    frozen_ok = all((r.error or r.status != 200) and r.elapsed_s < idle + 3.0 for r in frozen)
    avoid = sum(1 for r in later if r.status == 200 and not r.error and r.served != address)
    return [
        Row(
            "endpoint SIGSTOP mid-stream",
            f"the stream, and any request sent to the engine before it went stale, cut by the stream "
            f"idle timeout ({idle:g} s here), reported as an error",
            f"{hung.status} from {st.engine_name(hung.served)}: {hung.error or 'clean end'} "
            f"{cut_after:.1f} s after SIGSTOP; {len(frozen)}/{WAVE} sent at once went to it: "
            + (", ".join(f"{r.error or r.status} after {r.elapsed_s:.1f} s" for r in frozen) or "none"),
            hung.served == address and bool(hung.error) and cut_after < idle + 3.0 and frozen_ok,
            IDLE_TIMEOUT,
        ),
        Row(
            f"endpoint SIGSTOP: new requests {stale_s:g} s later",
            "all 200 elsewhere (the picker avoids it once its scrapes are stale)",
            f"{avoid}/{WAVE} ok elsewhere",
            avoid == WAVE,
            STALENESS,
        ),
    ]
