"""Ideal (infinite-cache) prefix reuse of a trace, at block granularity (paper §3, Findings 1-4).

Requests are replayed in time order against a cache that never evicts. A request's hit is the
longest prefix of its blocks already seen (for prefix-chained hashes this equals "every block seen
before"), and its reused tokens are the tokens of those blocks (a partial last block counts its
own tokens). Each reused block is attributed to the session that first produced it (the paper's
attribution): intra-session when that is the request's own session, else inter-session. A block is
a system-prompt block when some session's first request had it among its leading
``system_blocks``. The reuse interval of a reused block is the time from its previous use to this
request's arrival, where a use ends when that request completed (arrival + ``recorded_latency_s``)
if the trace records latencies (agentic ``api_time``), else at its arrival. A block still in use
by an overlapping request (sub-agents run in parallel) counts as reused after 0 s. Without a
global clock (agentic: every family's clock starts at 0) an interval is only measured when the
previous use was in the same family; cross-family reuse (the shared system prompt mapping) has no
meaningful interval and is left out of the interval sample (it still counts as reuse). Requests
are then replayed family by family (each in its own time order), so families never interleave.

Bookkeeping is dense numpy arrays indexed by block hash (offset by the smallest hash), so the
walk is linear in the number of blocks; hashes spread too sparsely for that are first compacted.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from smetric.trace.model import Trace, TraceRequest, expand_ranges

# Dense bookkeeping is used while the hash span is at most this many times the block count
# (or below _DENSE_MIN); otherwise hashes are compacted with np.unique first.
_DENSE_FACTOR = 4
_DENSE_MIN = 1 << 24


@dataclass(frozen=True, slots=True)
class ReuseResult:
    prompt_tokens: int
    reused_tokens: int
    intra_session_tokens: int
    intra_family_tokens: int
    system_tokens: int
    first_turn_reused_tokens: int
    n_blocks: int
    distinct_blocks: int
    # Reuse intervals as a weighted sample: interval_s[i] occurred interval_blocks[i] times.
    interval_s: npt.NDArray[np.float64]
    interval_blocks: npt.NDArray[np.int64]


def _hash_index(requests: list[TraceRequest]) -> tuple[int, int, npt.NDArray[np.int64] | None]:
    """``(offset, size, lookup)``: block h maps to ``h - offset`` (lookup None) or ``lookup[...]``."""
    with_blocks = [r.hash_ranges for r in requests if len(r.hash_ranges)]
    if not with_blocks:
        return 0, 0, None
    lo = min(int(r.min()) for r in with_blocks)
    hi = max(int(r.max()) for r in with_blocks)
    n_blocks = sum(r.n_blocks for r in requests)
    if hi - lo + 1 <= max(_DENSE_MIN, _DENSE_FACTOR * n_blocks):
        return lo, hi - lo + 1, None
    uniq = np.unique(np.concatenate([expand_ranges(r) for r in with_blocks]))
    return 0, len(uniq), uniq


def _tokens(mask: npt.NDArray[np.bool_], block_tokens: int, last_short: int) -> int:
    """Tokens of the blocks selected by ``mask``; the last block is ``last_short`` tokens short."""
    count = int(np.count_nonzero(mask)) * block_tokens
    return count - last_short if last_short and mask[-1] else count


def request_times(trace: Trace) -> npt.NDArray[np.float64]:
    """Each request's time: recorded family start + offset, or the offset alone (family clock)."""
    starts = trace.recorded_family_starts_s
    return np.array([starts.get(r.family_id, 0.0) + r.offset_s for r in trace.requests], dtype=np.float64)


def ideal_reuse(trace: Trace) -> ReuseResult:
    requests = trace.requests
    bt = trace.block_tokens
    offset, size, lookup = _hash_index(requests)
    times = request_times(trace)
    session_code = {s: i for i, s in enumerate(dict.fromkeys(r.session_id for r in requests))}
    family_code = {f: i for i, f in enumerate(dict.fromkeys(r.family_id for r in requests))}
    family_clock = not trace.recorded_family_starts_s
    keys: tuple[npt.NDArray[np.int64] | npt.NDArray[np.float64], ...] = (np.arange(len(requests)), times)
    if family_clock:
        keys = (*keys, np.array([family_code[r.family_id] for r in requests], dtype=np.int64))
    order = np.lexsort(keys)
    producer = np.full(size, -1, dtype=np.int32)  # session code that first produced the block
    producer_family = np.full(size, -1, dtype=np.int32)
    last_use = np.zeros(size, dtype=np.float64)
    last_family = np.full(size, -1, dtype=np.int32)
    is_system = np.zeros(size, dtype=bool)
    reused = intra = intra_fam = system = first_turn = total_prompt = 0
    iv_values: list[npt.NDArray[np.float64]] = []
    iv_counts: list[npt.NDArray[np.int64]] = []
    for i in order.tolist():
        r = requests[i]
        total_prompt += r.prompt_tokens
        if not len(r.hash_ranges):
            continue
        h = expand_ranges(r.hash_ranges)
        h = np.searchsorted(lookup, h) if lookup is not None else h - offset
        n = len(h)
        prod = producer[h]
        unseen = np.flatnonzero(prod < 0)
        k = int(unseen[0]) if len(unseen) else n
        # tokens of block j: bt, except a partial last block
        last_tokens = r.prompt_tokens - (n - 1) * bt
        partial_hit = k == n and last_tokens < bt
        hit_tokens = min(k * bt, r.prompt_tokens)
        s, f = session_code[r.session_id], family_code[r.family_id]
        if r.system_blocks:  # loaders set it on first requests only
            is_system[h[: r.system_blocks]] = True
        if k:
            short = bt - last_tokens if partial_hit else 0  # tokens the last hit block lacks
            reused += hit_tokens
            intra += _tokens(prod[:k] == s, bt, short)
            intra_fam += _tokens(producer_family[h[:k]] == f, bt, short)
            system += _tokens(is_system[h[:k]], bt, short)
            if r.turn == 0:
                first_turn += hit_tokens
            gaps = np.maximum(times[i] - last_use[h[:k]], 0.0)
            if family_clock:
                gaps = gaps[last_family[h[:k]] == f]
            if len(gaps):
                change = np.flatnonzero(np.diff(gaps)) + 1
                run_starts = np.concatenate(([0], change))
                iv_values.append(gaps[run_starts])
                iv_counts.append(np.diff(np.concatenate((run_starts, [len(gaps)]))))
        new = h[prod < 0]
        producer[new] = s
        producer_family[new] = f
        done = times[i] + (r.recorded_latency_s or 0.0)
        previous = last_use[h]
        if family_clock:  # another family's use is on another clock: start afresh
            previous = np.where(last_family[h] == f, previous, -np.inf)
        last_use[h] = np.maximum(previous, done)
        last_family[h] = f
    n_blocks = sum(r.n_blocks for r in requests)
    return ReuseResult(
        prompt_tokens=total_prompt,
        reused_tokens=reused,
        intra_session_tokens=intra,
        intra_family_tokens=intra_fam,
        system_tokens=system,
        first_turn_reused_tokens=first_turn,
        n_blocks=n_blocks,
        distinct_blocks=int(np.count_nonzero(producer >= 0)),
        interval_s=np.concatenate(iv_values) if iv_values else np.empty(0),
        interval_blocks=np.concatenate(iv_counts).astype(np.int64) if iv_counts else np.empty(0, np.int64),
    )


def weighted_quantile(
    values: npt.NDArray[np.float64], weights: npt.NDArray[np.int64], q: float
) -> float | None:
    """The smallest value v with weight(values <= v) >= q * total weight; None when empty."""
    if not len(values) or int(weights.sum()) == 0:
        return None
    order = np.argsort(values, kind="stable")
    cumulative = np.cumsum(weights[order])
    idx = int(np.searchsorted(cumulative, q * cumulative[-1], side="left"))
    return float(values[order][min(idx, len(values) - 1)])
