"""Optional shared-system-prompt mapping for traces whose hashes never cross session families.

The agentic trace hashes every family independently, so the Claude Code system prompt and tool
definitions every session starts with look unique. With this mapping, block ``j`` of a first
request's leading ``system_blocks`` blocks becomes id ``base(model) + j``: one shared id sequence
per ``model``, placed above every id in the trace so nothing collides. The same original->shared
map is applied to every request of that session family, so later turns keep sharing the prefix
with their own first turn (and with every other session of the same model).
"""

from __future__ import annotations

import bisect
import dataclasses

import numpy as np

from smetric.trace.model import HashRanges, TraceRequest

# (original_first, original_last, shared_first): originals [first, last] map to
# shared_first + (original - original_first).
Piece = tuple[int, int, int]


def _leading(ranges: HashRanges, n_blocks: int) -> list[tuple[int, int]]:
    """The first ``n_blocks`` blocks of ``ranges`` as ranges."""
    out: list[tuple[int, int]] = []
    left = n_blocks
    for first, last in ranges.tolist():
        if left <= 0:
            break
        take = min(left, last - first + 1)
        out.append((first, first + take - 1))
        left -= take
    return out


def _pieces(mapping: dict[int, int]) -> list[Piece]:
    """Group a hash->hash map into runs consecutive on both sides."""
    pieces: list[Piece] = []
    for orig in sorted(mapping):
        new = mapping[orig]
        if pieces:
            lo, hi, new_lo = pieces[-1]
            if orig == hi + 1 and new == new_lo + (orig - lo):
                pieces[-1] = (lo, orig, new_lo)
                continue
        pieces.append((orig, orig, new))
    return pieces


def remap_ranges(ranges: HashRanges, pieces: list[Piece]) -> HashRanges:
    """Apply ``pieces`` (sorted, disjoint) to ``ranges`` keeping block order; re-run-length encode."""
    out: list[list[int]] = []

    def emit(first: int, last: int) -> None:
        if out and out[-1][1] + 1 == first:
            out[-1][1] = last
        else:
            out.append([first, last])

    starts = [p[0] for p in pieces]
    for first, last in ranges.tolist():
        pos = first
        i = max(bisect.bisect_right(starts, first) - 1, 0)
        while pos <= last:
            while i < len(pieces) and pieces[i][1] < pos:
                i += 1
            if i == len(pieces) or pieces[i][0] > last:
                emit(pos, last)
                break
            lo, hi, new_lo = pieces[i]
            if pos < lo:
                emit(pos, lo - 1)
                pos = lo
            end = min(hi, last)
            emit(new_lo + (pos - lo), new_lo + (end - lo))
            pos = end + 1
    return np.array(out, dtype=np.int64).reshape(-1, 2)


def share_system_prompt(requests: list[TraceRequest]) -> tuple[list[TraceRequest], str]:
    """Return the remapped requests and a note describing the mapping."""
    top = max((int(r.hash_ranges[:, 1].max()) for r in requests if len(r.hash_ranges)), default=-1)
    firsts = [r for r in requests if r.prev_index < 0 and r.system_blocks > 0]
    longest: dict[str, int] = {}
    for r in firsts:
        longest[r.model] = max(longest.get(r.model, 0), r.system_blocks)
    base: dict[str, int] = {}
    next_id = top + 1
    for model, length in longest.items():
        base[model] = next_id
        next_id += length
    family_maps: dict[str, dict[int, int]] = {}
    conflicts = 0
    for r in firsts:
        mapping = family_maps.setdefault(r.family_id, {})
        j = 0
        for first, last in _leading(r.hash_ranges, r.system_blocks):
            for orig in range(first, last + 1):
                new = base[r.model] + j
                if mapping.setdefault(orig, new) != new:
                    conflicts += 1
                j += 1
    family_pieces = {fam: _pieces(m) for fam, m in family_maps.items()}
    out = []
    for r in requests:
        pieces = family_pieces.get(r.family_id)
        out.append(dataclasses.replace(r, hash_ranges=remap_ranges(r.hash_ranges, pieces)) if pieces else r)
    note = (
        f"shared system prompt: the leading floor((tool_tokens+system_tokens)/block) blocks of "
        f"{len(firsts)} first requests were mapped onto one shared id sequence per model "
        f"({len(base)} models, ids from {top + 1}), applied to every request of their families"
        + (
            f"; {conflicts} block(s) also lead first requests of another model in the same family "
            "(sub-agents on a different model) and keep the first model's shared id"
            if conflicts
            else ""
        )
    )
    return out, note
