"""Workload for one simulation: the trace prepared once, arrivals drawn per (rate, seed).

Arrivals (why not just "each trace family once"): the agentic trace has 560 session families that
last from minutes to 122 hours and are paced by real think times. Even if all of them ran at
once they would offer about 3.7 requests/s, far below what 32 instances serve, so starting the
trace's families faster cannot load a 32-instance cluster. Instead families are replayed as
*clones*: clone ``k > 0`` of a family gets its own block-id namespace (``id + k * id_span``)
except for the shared system-prompt ids, so clones never share a session's KV but do share the
system prompt. Each family keeps its recorded offsets, think times, turns and token counts.

Who starts families (``SimConfig.arrivals``):

* ``agents`` (default): a fixed population of concurrent agents
  (:class:`smetric.trace.SteadyAgents`), ``round(rate x mean family duration)`` of them (the
  population that offers ``rate`` families/s at light load, by Little's law). Each agent starts a
  new family the moment its previous one ends (every session's last request answered), and at
  ``t = 0`` every agent is already inside a family, at a uniform point of a length-biased draw
  (the renewal equilibrium), so the offered load is steady from ``t = 0`` and, past saturation,
  the closed loop slows the agents instead of piling up families. The k-th start of a family is
  its clone ``k``.
* ``stationary``: families arrive as a Poisson process at ``rate`` families/s over ``[-lead,
  horizon)`` with ``lead`` = the longest family span; the n-th arrival replays family
  ``perm[n % F]`` (a seeded permutation, redrawn every F arrivals) as clone ``n // F``. The open
  loop at the family level keeps adding families past saturation, so the sent rate drifts there.
* ``cold``: as ``stationary`` with every family starting at ``t >= 0`` (the request rate climbs
  for hours: families last up to 122 hours).

A family that started before ``t = 0`` sends only its requests due at ``t >= 0``
(:meth:`PreparedWorkload.first_sends`; its earlier turns are skipped, so their KV is not cached --
the warm-up absorbs that cold start). Unless the global tier is pre-warmed with them
(``SimConfig.prewarm_global_tier``, agents only), such a session's first request is routed as a
fresh history (:func:`fresh_view`: turn 0, no recorded hit), since no cache in the pool holds its
earlier turns; with the pre-warmed tier it keeps the trace's turn and recorded hit (the tier holds
its previous turn, as for any follow-up).

Preparation (once per worker, independent of policy and rate):

* every request becomes an :class:`~smetric.engine.EngineRequest` (block pieces as Python ints)
  and a :class:`~smetric.core.views.RequestView` (turn, est_hit_tokens, true session id);
* ``output_pieces``: when the session's next request extends this one's prompt, the ids of the
  next prompt's blocks between this prompt's end and the next request's ``est_hit_tokens`` --
  the blocks this request's answer fills on the instance that decodes it (the paper rewrites
  follow-ups so the cached answer is reused, §5.1; this is the same effect);
* requests the model cannot serve are marked dropped: ``prompt + output`` above
  ``min(model max context, KV capacity of one instance in whole blocks)`` (vLLM refuses a
  ``max_model_len`` that does not fit the KV pool, so such a prompt is rejected; the pool holds
  whole blocks, so a request that fits the token capacity but not its blocks is dropped too). A
  dropped request completes instantly at its send time (an error response) and its session
  continues.
"""

from __future__ import annotations

from dataclasses import dataclass, replace

import numpy as np
import numpy.typing as npt

from smetric.core.presets import InstancePreset
from smetric.core.views import RequestView
from smetric.engine import EngineRequest, Piece, count_blocks, pieces_from_ranges, slice_blocks
from smetric.trace import Trace, family_durations_s, poisson_family_arrivals


@dataclass(frozen=True, slots=True)
class PreparedWorkload:
    """A trace prepared for simulation on one preset (immutable, shared across runs)."""

    trace_name: str
    block_tokens: int
    engine: tuple[EngineRequest, ...]
    views: tuple[RequestView, ...]
    family: tuple[str, ...]
    offset_s: npt.NDArray[np.float64]
    think_s: npt.NDArray[np.float64]
    prev: npt.NDArray[np.int64]
    next: npt.NDArray[np.int64]
    dropped: npt.NDArray[np.bool_]
    max_tokens: int
    n_families: int
    family_first: tuple[tuple[int, ...], ...]  # per family: its sessions' first request indices
    family_names: tuple[str, ...]
    family_index: tuple[int, ...]  # per request: index of its family in family_names
    id_span: int  # block ids of clone k are id + k * id_span
    shared_from: int  # ids >= this are shared across families (system prompt); not offset
    notes: tuple[str, ...]
    trace: Trace
    family_span_s: tuple[float, ...] = ()  # per family: largest request offset
    family_duration_s: tuple[float, ...] = ()  # per family: latest offset + recorded latency

    @property
    def max_family_span_s(self) -> float:
        return max(self.family_span_s, default=0.0)

    @property
    def mean_family_duration_s(self) -> float:
        d = self.family_duration_s
        return sum(d) / len(d) if d else 0.0

    def __len__(self) -> int:
        return len(self.engine)

    @property
    def n_dropped(self) -> int:
        return int(self.dropped.sum())

    def engine_request(self, i: int, clone: int) -> EngineRequest:
        """Request ``i`` of the trace as sent by clone ``clone`` of its family."""
        base = self.engine[i]
        if clone == 0:
            return base
        off = clone * self.id_span
        return EngineRequest(
            f"{base.request_id}~{clone}",
            base.prompt_tokens,
            base.output_tokens,
            _shift(base.prompt_pieces, off, self.shared_from),
            _shift(base.output_pieces, off, self.shared_from),
            index=base.index,
        )

    def keyed_request(self, key: int) -> EngineRequest:
        """Request ``key`` of a run (``clone * len(self) + i``: request ``i`` as sent by clone
        ``clone`` of its family) with ``index=key``, so the engine's events name the run's key."""
        clone, i = divmod(key, len(self.engine))
        base = self.engine_request(i, clone)
        return EngineRequest(
            base.request_id,
            base.prompt_tokens,
            base.output_tokens,
            base.prompt_pieces,
            base.output_pieces,
            index=key,
        )

    def view(self, i: int, clone: int, fresh: bool = False) -> RequestView:
        """Request ``i``'s view as sent by clone ``clone``; ``fresh``: as a fresh history
        (:func:`fresh_view`)."""
        v = self.views[i]
        if clone != 0:
            sid = None if v.session_id is None else f"{v.session_id}~{clone}"
            v = RequestView(f"{v.request_id}~{clone}", v.prompt_tokens, v.turn, v.est_hit_tokens, sid)
        return fresh_view(v) if fresh else v

    def family_arrivals(
        self, rate_per_s: float, horizon_s: float, seed: int, lead_s: float = 0.0
    ) -> list[tuple[float, int, int]]:
        """Poisson family arrivals in ``[-lead_s, horizon_s)``: ``(start_s, family, clone)``."""
        return poisson_family_arrivals(self.n_families, rate_per_s, horizon_s, seed, lead_s)

    def first_sends(self, family: int, start_s: float, from_s: float = 0.0) -> list[tuple[float, int]]:
        """``(send_s, trace index)`` of each session's first request of a family started at
        ``start_s`` that is due at ``t >= from_s`` (turns due before are skipped; a session entirely
        before ``from_s`` sends nothing)."""
        out: list[tuple[float, int]] = []
        if self.family_span_s and start_s + self.family_span_s[family] < from_s:
            return out
        for i in self.family_first[family]:
            j = i
            while j >= 0 and start_s + float(self.offset_s[j]) < from_s:
                j = int(self.next[j])
            if j >= 0:
                out.append((start_s + float(self.offset_s[j]), j))
        return out


def fresh_view(view: RequestView) -> RequestView:
    """``view`` sent as a fresh history: turn 0, no recorded hit (``est_hit_tokens`` 0), the same
    prompt length. The first request of a session joined mid-way whose earlier turns no tier
    holds: nothing in the pool has its history, and this is what the bench sends for it (a system
    message and one user message, ``smetric.bench.synth.Conversation.next_turn`` on a session's
    first send), which a deployed picker parses as turn 0 with no assistant message
    (``smetric.epp.parse.body``)."""
    return replace(view, turn=0, est_hit_tokens=0)


def _shift(pieces: tuple[Piece, ...], off: int, shared_from: int) -> tuple[Piece, ...]:
    out: list[Piece] = []
    for a, b in pieces:
        if a >= shared_from:
            out.append((a, b))
        elif b < shared_from:
            out.append((a + off, b + off))
        else:
            out.append((a + off, shared_from - 1 + off))
            out.append((shared_from, b))
    return tuple(out)


def _shared_from(pieces: list[tuple[Piece, ...]], families: list[str]) -> int:
    """Smallest block id that occurs in two different families (``inf``-like if none)."""
    spans: dict[str, list[Piece]] = {}
    for p, fam in zip(pieces, families, strict=True):
        spans.setdefault(fam, []).extend(p)
    events: list[tuple[int, int, str]] = []
    for fam, ps in spans.items():
        for a, b in _merged(sorted(ps)):
            events.append((a, b, fam))
    events.sort()
    best = 1 << 62
    reach_b, reach_fam = -1, ""
    for a, b, fam in events:
        if a <= reach_b and fam != reach_fam:
            best = min(best, a)
        if b > reach_b:
            reach_b, reach_fam = b, fam
    return best


def _merged(pieces: list[Piece] | tuple[Piece, ...]) -> list[Piece]:
    out: list[Piece] = []
    for a, b in pieces:
        if out and out[-1][1] + 1 == a:
            out[-1] = (out[-1][0], b)
        else:
            out.append((a, b))
    return out


def _output_pieces(
    cur: tuple[Piece, ...], nxt: tuple[Piece, ...], next_est_hit_blocks: int
) -> tuple[Piece, ...]:
    nb = count_blocks(cur)
    if next_est_hit_blocks <= nb or count_blocks(nxt) <= nb:
        return ()
    if _merged(slice_blocks(nxt, 0, nb)) != _merged(list(cur)):
        return ()
    return tuple(slice_blocks(nxt, nb, next_est_hit_blocks))


def max_request_tokens(preset: InstancePreset, block_tokens: int | None = None) -> int:
    """Largest prompt + output one instance serves: model context, capped by its KV pool in whole
    blocks of ``block_tokens`` (the engine allocates ``ceil(tokens / block)`` blocks; None = the
    preset's own block size)."""
    bt = preset.block_size if block_tokens is None else block_tokens
    if bt < 1:
        raise ValueError(f"block_tokens must be >= 1, got {bt}")
    pool = preset.kv_capacity_tokens // bt * bt
    return min(preset.model.max_context_tokens, pool)


def prepare(trace: Trace, preset: InstancePreset) -> PreparedWorkload:
    """Build the per-request arrays the simulator reads (see the module docstring)."""
    reqs = trace.requests
    n = len(reqs)
    bt = trace.block_tokens
    pieces = [pieces_from_ranges(r.hash_ranges) for r in reqs]
    nxt = np.full(n, -1, dtype=np.int64)
    for r in reqs:
        if r.prev_index >= 0:
            nxt[r.prev_index] = r.index
    limit = max_request_tokens(preset, bt)
    engine: list[EngineRequest] = []
    views: list[RequestView] = []
    for i, r in enumerate(reqs):
        out_p: tuple[Piece, ...] = ()
        j = int(nxt[i])
        if j >= 0:
            out_p = _output_pieces(pieces[i], pieces[j], reqs[j].est_hit_tokens // bt)
        rid = f"{r.session_id}#{r.turn}"
        engine.append(
            EngineRequest(rid, max(1, r.prompt_tokens), max(1, r.output_tokens), pieces[i], out_p, index=i)
        )
        views.append(RequestView(rid, r.prompt_tokens, r.turn, r.est_hit_tokens, r.session_id))
    dropped = np.array([r.prompt_tokens + max(1, r.output_tokens) > limit for r in reqs], dtype=np.bool_)
    families = tuple(r.family_id for r in reqs)
    names = tuple(dict.fromkeys(families))
    fam_index = {f: k for k, f in enumerate(names)}
    firsts: list[list[int]] = [[] for _ in names]
    for r in reqs:
        if r.prev_index < 0:
            firsts[fam_index[r.family_id]].append(r.index)
    top = max((b for p in pieces for _, b in p), default=0)
    span = [0.0] * len(names)
    for r in reqs:
        k = fam_index[r.family_id]
        span[k] = max(span[k], r.offset_s)
    durations = family_durations_s(trace)
    return PreparedWorkload(
        trace_name=trace.name,
        block_tokens=bt,
        engine=tuple(engine),
        views=tuple(views),
        family=families,
        offset_s=np.array([r.offset_s for r in reqs], dtype=np.float64),
        think_s=np.array([max(0.0, r.think_time_s) for r in reqs], dtype=np.float64),
        prev=np.array([r.prev_index for r in reqs], dtype=np.int64),
        next=nxt,
        dropped=dropped,
        max_tokens=limit,
        n_families=len(names),
        family_first=tuple(tuple(f) for f in firsts),
        family_names=names,
        family_index=tuple(fam_index[f] for f in families),
        id_span=top + 1,
        shared_from=_shared_from(pieces, list(families)),
        notes=tuple(trace.notes),
        trace=trace,
        family_span_s=tuple(span),
        family_duration_s=tuple(durations[f] for f in names),
    )
