"""The staleness row of ``chaos.faults.endpoint_kill``: a killed engine is avoided while it is down
and chosen again once it is scraped fresh (:data:`~smetric.bench.chaos.guards.STALENESS`).

While the engine is down, a wave of new sessions with long prompts goes out at once: the picker's
dispatch ledger charges each to the engine it chose, so the live engines soon look busier than the
dead one, whose last scraped gauges are idle. The picker must leave it out all the same (its
scrapes fail: the endpoint is stale). A request sent to it would still get 200 -- the gateway
retries a refused connection on the picker's next fallback -- so the row counts the gateway's
retries during the wave: each is a request the picker sent to the dead engine.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from smetric.bench.chaos.gateway import envoy_counter
from smetric.bench.chaos.guards import STALENESS
from smetric.bench.chaos.row import Row
from smetric.bench.chaos.stack import ChaosStack, Reply, chat

DOWN_WAVE = 12  # new sessions sent at once while the engine is down
DOWN_FILLER = 400  # their one tool output: a prompt of a few thousand tokens, charged to the ledger


@dataclass(frozen=True, slots=True)
class DownWave:
    """New sessions sent while ``address`` was down, and the gateway retries they needed."""

    address: str
    replies: tuple[Reply, ...]
    retries: float


async def while_down(st: ChaosStack, address: str) -> DownWave:
    before = await envoy_counter(st, st.admin_port, "cluster.pool.upstream_rq_retry")
    tag = time.monotonic_ns()
    replies = await asyncio.gather(
        *(st.post(chat(f"down-{tag}-{n}", 1, filler=DOWN_FILLER, max_tokens=4)) for n in range(DOWN_WAVE))
    )
    after = await envoy_counter(st, st.admin_port, "cluster.pool.upstream_rq_retry")
    return DownWave(address, tuple(replies), after - before)


def stale_row(st: ChaosStack, down: DownWave, back: list[Reply]) -> Row:
    """``back``: new sessions sent once the restarted engine was scraped fresh again."""
    ok = sum(1 for r in down.replies if r.status == 200 and not r.error and r.served != down.address)
    on_it = sum(1 for r in back if r.served == down.address)
    back_ok = sum(1 for r in back if r.status == 200 and not r.error)
    return Row(
        "endpoint SIGKILL: new sessions while it is down, then after its restart",
        "while down: none sent to it (0 gateway retries), all 200 elsewhere; once restarted and "
        "scraped fresh: all 200",
        f"while down: {ok}/{len(down.replies)} ok elsewhere, gateway retries {down.retries:+.0f}; "
        f"restarted: {on_it}/{len(back)} placed on it, {back_ok}/{len(back)} ok",
        ok == len(down.replies) and down.retries == 0 and back_ok == len(back),
        STALENESS,
    )


__all__ = ["DownWave", "stale_row", "while_down"]
