"""Chaos fault of a frozen engine (SIGSTOP: the kernel still accepts its connections, nothing
answers). The picker stops choosing it once its scrapes fail, so only the requests sent before that
reach it -- here the next turns of sessions it served, sent the moment it froze. An attempt that
sees no byte for the gateway's per-try idle timeout is reset: before its response it is retried
on the picker's next fallback (200 from another engine), after that the stream is cut (an error
at the client). The stream idle timeout is the outer bound."""

from __future__ import annotations

import asyncio
import signal
import time

from smetric.bench.chaos_guards import IDLE_TIMEOUT, PER_TRY_IDLE, STALENESS
from smetric.bench.chaos_row import Row
from smetric.bench.chaos_stack import ChaosStack, chat

WAVE = 9


async def endpoint_stop(st: ChaosStack, quick: bool) -> list[Row]:
    idle = st.settings.stream_idle_timeout_s
    per_try = st.settings.per_try_idle_timeout_s
    stale_s = 2.5  # the picker's 2 s staleness threshold, plus a scrape interval
    victim, long_req = await st.long_stream("stop", idle + 10.0)
    address = st.endpoints[int(victim.removeprefix("engine"))]
    # Sessions whose first turn the engine about to freeze served: their next turn sticks to it.
    tag = time.monotonic_ns()
    placed = await asyncio.gather(*(st.post(chat(f"stick-{tag}-{n}", 0)) for n in range(3 * WAVE)))
    sticky = [f"stick-{tag}-{n}" for n, r in enumerate(placed) if r.served == address][:WAVE]
    st.signal(victim, signal.SIGSTOP)
    t_stop = time.monotonic()
    try:
        first = asyncio.gather(*(st.post(chat(s, 1), timeout_s=idle + 10.0) for s in sticky))
        await asyncio.sleep(stale_s)
        later = await asyncio.gather(
            *(st.post(chat(f"stop-{tag}-{n}", 0), timeout_s=idle + 10.0) for n in range(WAVE))
        )
        hung = await long_req
        cut_after = time.monotonic() - t_stop
        at_once = await first
    finally:
        st.signal(victim, signal.SIGCONT)
    await st.wait_fresh()
    retried = sum(1 for r in at_once if r.status == 200 and not r.error and r.served != address)
    worst = max((r.elapsed_s for r in at_once), default=0.0)
    avoid = sum(1 for r in later if r.status == 200 and not r.error and r.served != address)
    bound_s = per_try + 3.0
    return [
        Row(
            "endpoint SIGSTOP mid-stream",
            f"cut by the gateway's idle bounds (per-try {per_try:g} s, stream {idle:g} s here), "
            "reported as an error",
            f"{hung.status} from {st.engine_name(hung.served)}: {hung.error or 'clean end'} "
            f"{cut_after:.1f} s after SIGSTOP",
            hung.served == address and bool(hung.error) and cut_after < bound_s,
            IDLE_TIMEOUT,
        ),
        Row(
            "endpoint SIGSTOP: next turns of its sessions, sent as it froze",
            f"all 200 from another engine within {bound_s:g} s (reset after the {per_try:g} s per-try "
            "idle timeout, retried on the picker's next fallback)",
            f"{retried}/{len(at_once)} retried to 200 elsewhere "
            f"({sorted({r.status for r in at_once})}); slowest {worst:.1f} s",
            len(at_once) > 0 and retried == len(at_once) and worst < bound_s,
            PER_TRY_IDLE,
        ),
        Row(
            f"endpoint SIGSTOP: new sessions {stale_s:g} s later",
            "all 200 elsewhere (the picker avoids it once its scrapes fail)",
            f"{avoid}/{WAVE} ok elsewhere",
            avoid == WAVE,
            STALENESS,
        ),
    ]
