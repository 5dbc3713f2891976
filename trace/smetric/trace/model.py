"""The typed trace model every loader produces and every consumer (stats, simulator, bench) reads.

Block hashes are kept run-length encoded as an ``(k, 2)`` int64 array of inclusive
``[first, last]`` ranges (the agentic trace's own encoding): a 100k-token prompt is a handful of
ranges instead of 1,600 Python ints, which keeps the full trace in a few MB.
"""

from __future__ import annotations

from collections.abc import Iterator, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

HashRanges = npt.NDArray[np.int64]


def expand_ranges(ranges: HashRanges) -> npt.NDArray[np.int64]:
    """``[[a, b], [c, d]] -> [a, a+1, ..., b, c, ..., d]``."""
    if len(ranges) == 0:
        return np.empty(0, dtype=np.int64)
    if len(ranges) == 1:
        return np.arange(ranges[0, 0], ranges[0, 1] + 1, dtype=np.int64)
    lengths = ranges[:, 1] - ranges[:, 0] + 1
    before = np.cumsum(lengths) - lengths  # blocks in the ranges before each range
    return np.repeat(ranges[:, 0] - before, lengths) + np.arange(int(lengths.sum()), dtype=np.int64)


def compress_hashes(hashes: Sequence[int] | npt.NDArray[np.int64]) -> HashRanges:
    """Inverse of :func:`expand_ranges` (consecutive runs become one range)."""
    arr = np.asarray(hashes, dtype=np.int64)
    if arr.size == 0:
        return np.empty((0, 2), dtype=np.int64)
    breaks = np.nonzero(np.diff(arr) != 1)[0]
    starts = np.concatenate(([0], breaks + 1))
    ends = np.concatenate((breaks, [arr.size - 1]))
    return np.stack((arr[starts], arr[ends]), axis=1)


@dataclass(frozen=True, slots=True, eq=False)
class TraceRequest:
    """One LLM request of a trace.

    ``offset_s`` is the request's time relative to its session family's start (sub-agents share
    their parent's clock); ``prev_index`` the index (in :attr:`Trace.requests`) of the same
    session's previous request, or -1. ``est_hit_tokens`` is the prompt length up to and including
    the previous turn's answer (algorithms.md), 0 for a first turn.
    """

    index: int
    session_id: str
    family_id: str
    parent_session_id: str | None
    turn: int
    offset_s: float
    think_time_s: float
    prompt_tokens: int
    output_tokens: int
    hash_ranges: HashRanges
    trigger: str = "other"
    prev_index: int = -1
    est_hit_tokens: int = 0
    system_blocks: int = 0  # leading blocks that are system prompt + tools (first requests only)
    model: str = ""  # the recorded model name where the format has one (agentic), else ""
    # Seconds the original provider took to answer (agentic ``api_time``); None when not recorded.
    recorded_latency_s: float | None = None
    # False when the trace has no think time for this request (``think_time_s`` is then 0: the
    # closed loop sends it at its recorded offset or right after its predecessor completes).
    think_time_recorded: bool = True

    @property
    def n_blocks(self) -> int:
        return (
            int((self.hash_ranges[:, 1] - self.hash_ranges[:, 0] + 1).sum()) if len(self.hash_ranges) else 0
        )

    def block_hashes(self) -> npt.NDArray[np.int64]:
        return expand_ranges(self.hash_ranges)

    def block_token_counts(self, block_tokens: int) -> npt.NDArray[np.int64]:
        """Tokens each hashed block covers: ``block_tokens``, except a partial last block."""
        starts = np.arange(self.n_blocks, dtype=np.int64) * block_tokens
        return np.clip(self.prompt_tokens - starts, 0, block_tokens)


@dataclass(slots=True)
class Trace:
    """A loaded trace: requests in file order plus facts about how it was built."""

    name: str
    block_tokens: int
    requests: list[TraceRequest]
    sessions_inferred: bool = False
    has_sessions: bool = True
    has_hashes: bool = True
    notes: list[str] = field(default_factory=list)
    dropped_over_context: int = 0
    # Lines skipped as malformed (only with ``on_error="skip"``; the default raises instead).
    skipped_malformed: int = 0
    # The loader's format name: "agentic", "mooncake", "bailian" or "azure".
    format: str = ""
    # family_id -> recorded start (s since the trace's first request) for formats with a global
    # clock; empty for the agentic trace, whose replay picks family start times itself.
    recorded_family_starts_s: dict[str, float] = field(default_factory=dict)

    def __len__(self) -> int:
        return len(self.requests)

    def __iter__(self) -> Iterator[TraceRequest]:
        return iter(self.requests)

    def sessions(self) -> dict[str, list[TraceRequest]]:
        out: dict[str, list[TraceRequest]] = {}
        for r in self.requests:
            out.setdefault(r.session_id, []).append(r)
        return out

    def families(self) -> dict[str, list[TraceRequest]]:
        out: dict[str, list[TraceRequest]] = {}
        for r in self.requests:
            out.setdefault(r.family_id, []).append(r)
        return out
