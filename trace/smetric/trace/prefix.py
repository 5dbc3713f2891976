"""Helpers for formats that list every block hash (mooncake, bailian): shared system prefix depth."""

from __future__ import annotations

from collections import Counter
from collections.abc import Sequence


def shared_prefix_depth(hash_lists: Sequence[Sequence[int]]) -> int:
    """How many leading blocks are a system prompt shared across sessions, in blocks.

    ``hash_lists`` are the requests' block hashes in arrival order. For each request, ``j`` is the
    position of its first block never seen before (skipping requests with nothing seen or nothing
    new). A new session shares exactly the system prefix with earlier requests, so its ``j`` is the
    prefix length, while follow-up turns have ``j`` equal to their (varied) history lengths; the
    depth is therefore the most common ``j`` (the smallest on ties), if at least two requests have
    it, else 0.
    """
    seen: set[int] = set()
    firsts: Counter[int] = Counter()
    for hashes in hash_lists:
        j = 0
        while j < len(hashes) and hashes[j] in seen:
            j += 1
        if 0 < j < len(hashes):
            firsts[j] += 1
        seen.update(hashes)
    if not firsts:
        return 0
    best = max(firsts.values())
    depth = min(j for j, count in firsts.items() if count == best)
    return depth if best >= 2 else 0
