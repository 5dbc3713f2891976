"""The global tier's steady state for sessions agents join mid-way (``SimConfig.prewarm_global_tier``)."""

from __future__ import annotations

from collections.abc import Sequence

from smetric.engine import Instance
from smetric.engine.prefix_cache import count_blocks, slice_blocks
from smetric.sim.tier_view import TierView
from smetric.sim.workload import PreparedWorkload


def prewarm_tier(
    cluster: Sequence[Instance],
    work: PreparedWorkload,
    tier_view: TierView | None,
    warm: list[tuple[float, int]],
) -> None:
    """Write what LMCache wrote for the joined sessions' earlier turns before ``t = 0``.

    ``warm`` holds ``(recorded send time, key)`` of the last request each joined session sent
    before joining: its prompt's whole chunks, and its answer only with ``save_decode_cache``
    (:meth:`GlobalTier.written_range`), are written oldest first, so a bounded tier keeps the most
    recent (LRU). No link time is charged: the writes happened before ``t = 0``. The GPU tiers
    start empty (where a session's KV would sit is the policy's choice); without a global tier
    nothing is written. The picker's tier view records those prompts as routed too.
    """
    tier = cluster[0].global_tier if cluster else None
    if tier is None:
        return
    n, bt = len(work), work.block_tokens
    for _, key in sorted(warm):
        clone, i = divmod(key, n)
        req = work.engine_request(i, clone)
        n_blocks = count_blocks(req.prompt_pieces)
        _, hi = tier.written_range(0, req.prompt_tokens, bt, n_blocks)
        written = slice_blocks(req.prompt_pieces, 0, hi)
        if tier.path.save_decode_cache:
            written = written + list(req.output_pieces)
        tier.write(written)
        if tier_view is not None:
            tier_view.routed(req.prompt_pieces, req.prompt_tokens)
