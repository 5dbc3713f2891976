"""One engine instance: vLLM-V1-style continuous batching with chunked prefill, fast-forwarded.

Scheduling (at every step boundary, like vLLM V1's ``Scheduler.schedule``):

1. Admission, FCFS with head-of-line blocking: the head waiting request is admitted while
   ``running + loading < max_num_seqs`` and its KV fits: it pins its local prefix hit and
   reserves ``ceil((prompt + output) / block) - local_hit`` blocks (evicting unpinned LRU blocks).
   No preemption: the whole output is reserved up front (agent answers are short: median 216
   tokens), so a running request never runs out of KV. A full hit is capped at ``prompt - 1``
   tokens (vLLM always recomputes the last prompt token).
2. Global tier: the part of the prompt beyond the local hit that the global tier holds is loaded
   first, then the request prefills only the rest. Synchronous tier (LMCacheConnectorV1, the
   default): each admission's lookup latency and load run before the step's forward pass and
   stall the whole batch. Asynchronous tier (LMCacheMPConnector): the request waits in
   ``loading`` (vLLM's ``WAITING_FOR_REMOTE_KVS``) for its lookup and load while the batch runs on.
   Timing of a load (per-GPU rate, node link, store side): :mod:`smetric.engine.global_tier`.
3. Step composition: every decoding request takes one token of the ``max_num_batched_tokens``
   budget, then prefill chunks fill the rest FCFS.

Fast-forward: while no request is prefilling, the batch composition is constant until the next
decode finishes, so the whole stretch of ``k`` decode steps is one segment whose length is the
exact sum of the roofline step times (:meth:`StepModel.decode_stretch_s`); an arrival or a load
completion inside a stretch truncates it at the end of the step in flight (steps of a stretch are
taken to have its mean duration). Steps with a prefill chunk are simulated one by one. Events are
therefore per request phase and per prefill chunk, never per decode token.

Driving: both a discrete-event simulator and a wall-clock driver use the same three calls --
``submit(request, now_s)``, ``next_event_s()`` and ``advance(until_s) -> [EngineEvent]``; a live
server also uses ``abort(request_id)`` and ``decoded_tokens(now_s)`` (streaming progress).
"""

from __future__ import annotations

import heapq
import math
from collections import deque
from dataclasses import dataclass

from smetric.core.presets import InstancePreset
from smetric.engine.global_tier import GlobalTier
from smetric.engine.prefix_cache import BlockCache, KvEventSink, Piece, count_blocks, slice_blocks
from smetric.engine.request import EngineEvent, EngineRequest, RequestTiming
from smetric.engine.roofline import StepModel

_NAN = float("nan")
_INF = float("inf")
_IDLE, _STEP, _STRETCH = 0, 1, 2
_WAITING, _LOADING, _PREFILL, _DECODE, _DONE = 0, 1, 2, 3, 4


@dataclass(frozen=True, slots=True)
class EngineConfig:
    """Per-instance engine settings (see :meth:`from_preset` for where each comes from)."""

    block_tokens: int
    capacity_blocks: int
    max_num_batched_tokens: int
    max_num_seqs: int
    decode: bool = True  # False: prefill-only instance (PD disaggregation); done at first token
    node: int = 0  # index of the node whose NIC this instance's global-tier loads use

    @staticmethod
    def from_preset(
        preset: InstancePreset, block_tokens: int, *, decode: bool = True, node: int = 0
    ) -> EngineConfig:
        """Capacity = ``preset.kv_capacity_tokens`` in blocks of the trace's granularity."""
        if block_tokens <= 0:
            raise ValueError("block_tokens must be > 0")
        return EngineConfig(
            block_tokens=block_tokens,
            capacity_blocks=preset.kv_capacity_tokens // block_tokens,
            max_num_batched_tokens=preset.max_num_batched_tokens,
            max_num_seqs=preset.max_num_seqs,
            decode=decode,
            node=node,
        )


class _Req:
    __slots__ = (
        "admitted_s",
        "arrival_s",
        "decoded",
        "done_tokens",
        "first_s",
        "global_blocks",
        "loaded_s",
        "local_blocks",
        "n_blocks",
        "phase",
        "pinned",
        "reserved",
        "save_left",
        "spec",
        "tier_blocks",
    )

    def __init__(self, spec: EngineRequest, arrival_s: float, n_blocks: int) -> None:
        self.spec = spec
        self.arrival_s = arrival_s
        self.n_blocks = n_blocks
        self.phase = _WAITING
        self.admitted_s = _NAN
        self.loaded_s = _NAN
        self.first_s = _NAN
        self.local_blocks = 0
        self.global_blocks = 0
        self.tier_blocks = 0  # the global tier's own prefix hit at admission (LMCache's lookup)
        self.save_left = 0  # blocks still to copy GPU -> CPU for the store (wait_for_save)
        self.done_tokens = 0
        self.decoded = 0
        self.reserved = 0
        self.pinned: list[Piece] = []


class Instance:
    """A simulated vLLM instance. Not thread-safe; one driver owns it."""

    def __init__(
        self,
        name: str,
        step_model: StepModel,
        config: EngineConfig,
        global_tier: GlobalTier | None = None,
        kv_events: KvEventSink | None = None,
    ) -> None:
        self.name = name
        self.model = step_model
        self.config = config
        self.cache = BlockCache(config.capacity_blocks, kv_events)
        self.global_tier = global_tier
        self.now_s = 0.0
        self.steps = 0
        self.segments = 0
        self._waiting: deque[_Req] = deque()
        self._loading: list[tuple[float, int, _Req]] = []
        self._prefill: list[_Req] = []
        self._decode: list[_Req] = []
        self._seq = 0
        self._pending: list[EngineEvent] = []
        self._kind = _IDLE
        self._seg_start = 0.0
        self._seg_end = 0.0
        self._seg_dt = 0.0
        self._seg_steps = 0
        self._seg_chunks: list[tuple[_Req, int]] = []
        self._seg_decodes: list[_Req] = []

    # ------------------------------------------------------------------ observation
    @property
    def num_running(self) -> int:
        """vLLM ``num_requests_running``: prefilling + decoding."""
        return len(self._prefill) + len(self._decode)

    @property
    def num_waiting(self) -> int:
        """vLLM ``num_requests_waiting``: queued + loading KV from the global tier."""
        return len(self._waiting) + len(self._loading)

    @property
    def kv_usage(self) -> float:
        return self.cache.usage

    def max_tokens(self) -> int:
        """Largest ``prompt + output`` (decode mode) this instance can ever hold."""
        return self.config.capacity_blocks * self.config.block_tokens

    def fits(self, request: EngineRequest) -> bool:
        return self._total_blocks(request) <= self.config.capacity_blocks

    def local_hit_tokens(self, request: EngineRequest) -> int:
        """c[i]: tokens of the request's prompt in this instance's GPU tier."""
        bt = self.config.block_tokens
        return self.cache.match(request.prompt_pieces, (request.prompt_tokens - 1) // bt) * bt

    def next_event_s(self) -> float:
        """Engine time of the next internal state change (``inf`` when idle)."""
        t = self._seg_end if self._kind != _IDLE else _INF
        if self._loading and self._loading[0][0] < t:
            t = self._loading[0][0]
        return t

    # ------------------------------------------------------------------ driving
    def submit(self, request: EngineRequest, now_s: float) -> None:
        """Enqueue a request arriving at ``now_s`` (>= the time of the last call)."""
        if now_s < self.now_s - 1e-9:
            raise ValueError(f"{self.name}: submit at {now_s} is before engine time {self.now_s}")
        if not self.fits(request):
            raise ValueError(
                f"{self.name}: request {request.request_id} needs {self._total_blocks(request)} KV "
                f"blocks, more than the instance holds ({self.config.capacity_blocks})"
            )
        # Bind after advance(): it swaps ``_pending`` for a fresh list.
        caught_up = self.advance(now_s)
        self._pending.extend(caught_up)
        self._waiting.append(_Req(request, now_s, count_blocks(request.prompt_pieces)))
        if self._kind == _IDLE:
            self._schedule(now_s)
        elif self._kind == _STRETCH:
            self._truncate(now_s)

    def advance(self, until_s: float) -> list[EngineEvent]:
        """Process every state change up to ``until_s``; returns the events, in time order."""
        out, self._pending = self._pending, []
        while True:
            tl = self._loading[0][0] if self._loading else _INF
            te = self._seg_end if self._kind != _IDLE else _INF
            if tl <= te:
                if tl > until_s:
                    break
                _, _, r = heapq.heappop(self._loading)
                r.phase, r.loaded_s = _PREFILL, tl
                self._prefill.append(r)
                if self._kind == _STRETCH:
                    self._truncate(tl)
                elif self._kind == _IDLE:
                    self._schedule(tl)
            else:
                if te > until_s:
                    break
                self._complete(te, out)
                self._schedule(te)
        if until_s > self.now_s and self._kind == _IDLE:
            self.now_s = until_s
        return out

    def abort(self, request_id: str) -> bool:
        """Drop a request in any phase and release its KV (vLLM ``abort_request``).

        The step in flight keeps its modelled duration; a global-tier load already started keeps
        its NIC time. Returns False when the request is not in this instance.
        """
        for queue in (self._waiting, self._prefill, self._decode):
            for r in queue:
                if r.spec.request_id == request_id:
                    queue.remove(r)
                    self._release(r)
                    return True
        for i, (_, _, r) in enumerate(self._loading):
            if r.spec.request_id == request_id:
                self._loading.pop(i)
                heapq.heapify(self._loading)
                self._release(r)
                return True
        return False

    def decoded_tokens(self, now_s: float) -> dict[str, int]:
        """Tokens produced by ``now_s`` (first token included) by every decoding request.

        Inside a fast-forwarded stretch the steps have the stretch's mean duration, so the count
        is ``decoded + floor((now - start) / step)``.
        """
        extra = 0
        if self._kind == _STRETCH and self._seg_dt > 0:
            extra = math.floor((now_s - self._seg_start) / self._seg_dt + 1e-9)
            extra = max(0, min(self._seg_steps, extra))
        in_seg = {id(r) for r in self._seg_decodes}
        out: dict[str, int] = {}
        for r in self._decode:
            n = r.decoded + (extra if id(r) in in_seg else 0)
            out[r.spec.request_id] = min(n, r.spec.output_tokens)
        return out

    # ------------------------------------------------------------------ internals
    def _release(self, r: _Req) -> None:
        self._seg_decodes = [d for d in self._seg_decodes if d is not r]
        self._seg_chunks = [(c, n) for c, n in self._seg_chunks if c is not r]
        self.cache.unreserve(r.reserved)
        r.reserved = 0
        if r.pinned:
            self.cache.unpin(r.pinned)
            r.pinned = []
        r.phase = _DONE

    def _total_blocks(self, request: EngineRequest) -> int:
        tokens = request.prompt_tokens + (request.output_tokens if self.config.decode else 0)
        return -(-tokens // self.config.block_tokens)

    def _truncate(self, t: float) -> None:
        """Cut the current decode stretch at the end of the step in flight at ``t``."""
        j = math.ceil((t - self._seg_start) / self._seg_dt - 1e-9)
        j = max(0, min(j, self._seg_steps))
        if j < self._seg_steps:
            self._seg_steps = j
            self._seg_end = self._seg_start + j * self._seg_dt

    def _admit(self, t: float) -> float:
        """Admit waiting requests at ``t``; returns when the engine can start the step.

        Every admission asks the global tier first (``lookup_s``). A synchronous tier
        (LMCacheConnectorV1: a blocking lookup in vLLM's scheduler, the load before the forward
        pass) charges both to the step, stalling the whole batch; an asynchronous one
        (LMCacheMPConnector: the lookup answers "not yet" and vLLM skips the request, then
        ``WAITING_FOR_REMOTE_KVS`` during the load) parks only the request in ``loading`` for its
        lookup and load while the batch runs on."""
        cfg, cache, gt = self.config, self.cache, self.global_tier
        bt = cfg.block_tokens
        busy = t
        while self._waiting:
            if len(self._prefill) + len(self._decode) + len(self._loading) >= cfg.max_num_seqs:
                return busy
            r = self._waiting[0]
            spec = r.spec
            cap = min((spec.prompt_tokens - 1) // bt, r.n_blocks)
            lb = cache.match(spec.prompt_pieces, cap)
            hit = slice_blocks(spec.prompt_pieces, 0, lb) if lb else []
            if hit:
                cache.pin(hit)
            need = self._total_blocks(spec) - lb
            if not cache.reserve(need):
                if hit:
                    cache.unpin(hit, restamp=False)
                return busy
            self._waiting.popleft()
            r.admitted_s = t
            r.local_blocks, r.reserved, r.pinned = lb, need, hit
            gb = gt.match(spec.prompt_pieces, cap) if gt is not None else 0
            extra = gb - lb if gb > lb else 0
            r.global_blocks = extra
            r.tier_blocks = gb
            if gt is not None:
                lo, hi = gt.written_range(gb, spec.prompt_tokens, bt, r.n_blocks)
                r.save_left = hi - lo
            r.done_tokens = (lb + extra) * bt
            if gt is not None and not gt.synchronous:
                # asynchronous: the lookup and the load delay only this request
                ready = t + gt.lookup_s
                if extra > 0:
                    ready = gt.load(cfg.node, extra, ready, slice_blocks(spec.prompt_pieces, lb, gb))
                if ready > t:
                    r.phase = _LOADING
                    self._seq += 1
                    heapq.heappush(self._loading, (ready, self._seq, r))
                else:
                    r.phase, r.loaded_s = _PREFILL, t
                    self._prefill.append(r)
                continue
            if gt is not None:
                busy += gt.lookup_s
            if gt is not None and extra > 0:
                busy = gt.load(cfg.node, extra, busy, slice_blocks(spec.prompt_pieces, lb, gb))
                r.phase, r.loaded_s = _PREFILL, busy
                self._prefill.append(r)
            else:
                r.phase, r.loaded_s = _PREFILL, t
                self._prefill.append(r)
        return busy

    def _schedule(self, t: float) -> None:
        self.now_s = t
        stall = self._admit(t) - t  # lookups and synchronous global-tier loads
        decodes = self._decode
        n_dec = len(decodes)
        dec_ctx = 0
        for r in decodes:
            dec_ctx += r.spec.prompt_tokens + r.decoded
        model = self.model
        self._seg_start = t
        self._seg_decodes = list(decodes)
        if self._prefill:
            budget = self.config.max_num_batched_tokens - n_dec
            chunks: list[tuple[_Req, int]] = []
            n_pre, pre_ctx, cost = 0, 0, 0.0
            saved = 0  # blocks the step copies to the store (LMCache's wait_for_save blocks the step)
            bt = self.config.block_tokens
            for r in self._prefill:
                if budget <= 0:
                    break
                c = min(r.spec.prompt_tokens - r.done_tokens, budget)
                if r.save_left:
                    now = (
                        r.save_left
                        if r.done_tokens + c >= r.spec.prompt_tokens
                        else min(r.save_left, c // bt)
                    )
                    r.save_left -= now
                    saved += now
                chunks.append((r, c))
                cost += model.chunk_s(r.done_tokens, c)
                pre_ctx += r.done_tokens
                n_pre += c
                budget -= c
            self._seg_chunks = chunks
            self._kind = _STEP
            self._seg_steps = 1
            self._seg_dt = stall + model.step_s(n_dec, dec_ctx, n_pre, pre_ctx, cost)
            if saved and self.global_tier is not None:
                self._seg_dt += self.global_tier.save_copy_s(saved)
            self._seg_end = t + self._seg_dt
        elif decodes:
            k = min(r.spec.output_tokens - r.decoded for r in decodes)
            total = stall + model.decode_stretch_s(n_dec, dec_ctx, k)
            self._seg_chunks = []
            self._kind = _STRETCH
            self._seg_steps = k
            self._seg_dt = total / k
            self._seg_end = t + total
        else:
            self._kind = _IDLE
            self._seg_chunks = []
            self._seg_decodes = []

    def _complete(self, t: float, out: list[EngineEvent]) -> None:
        self.segments += 1
        n = self._seg_steps
        self.steps += n
        finished = False
        for r in self._seg_decodes:
            r.decoded += n
            if r.decoded >= r.spec.output_tokens:
                self._finish(r, t, out)
                finished = True
        if finished:
            self._decode = [r for r in self._decode if r.phase == _DECODE]
        if self._kind == _STEP:
            done_prefill = False
            for r, c in self._seg_chunks:
                r.done_tokens += c
                if r.done_tokens >= r.spec.prompt_tokens:
                    done_prefill = True
                    self._first_token(r, t, out)
            if done_prefill:
                self._prefill = [r for r in self._prefill if r.phase == _PREFILL]
        self._kind = _IDLE

    def _first_token(self, r: _Req, t: float, out: list[EngineEvent]) -> None:
        spec, cache, gt = r.spec, self.cache, self.global_tier
        r.first_s = t
        r.decoded = 1
        nb, lb = r.n_blocks, r.local_blocks
        if nb > lb:
            cache.unreserve(nb - lb)
            r.reserved -= nb - lb
            cache.insert(slice_blocks(spec.prompt_pieces, lb, nb), pin=True)
        # Write-through as LMCache 0.5.6 does it (GlobalTier.written_range): the prompt's whole chunks
        # past the tier's own hit, the ones served from the local prefix cache included (LMCache's
        # vllm_v1_adapter.py: RequestTracker.from_new_request sets num_saved_tokens =
        # lmcache_cached_tokens, and ReqMeta.from_request_tracker stores from skip_leading_tokens =
        # num_saved_tokens). So a session that keeps hitting its engine's GPU cache keeps its copy in
        # a bounded tier. The prefix the tier already held counts as used (assumed: LRU on use, no
        # bytes move).
        if gt is not None:
            lo, hi = gt.written_range(r.tier_blocks, spec.prompt_tokens, self.config.block_tokens, nb)
            if r.tier_blocks:
                gt.refresh(slice_blocks(spec.prompt_pieces, 0, r.tier_blocks))
            if hi > lo:
                gt.write(slice_blocks(spec.prompt_pieces, lo, hi), self.config.node, t)
        r.pinned = slice_blocks(spec.prompt_pieces, 0, nb)
        out.append(EngineEvent("first_token", t, spec, self.name, self._timing(r, _NAN)))
        if not self.config.decode or spec.output_tokens <= 1:
            self._finish(r, t, out)
        else:
            r.phase = _DECODE
            self._decode.append(r)

    def _finish(self, r: _Req, t: float, out: list[EngineEvent]) -> None:
        spec, cache = r.spec, self.cache
        r.phase = _DONE
        cache.unreserve(r.reserved)
        if self.config.decode and spec.output_pieces and r.reserved > 0:
            produced = slice_blocks(spec.output_pieces, 0, r.reserved)
            cache.insert(produced)
            if self.global_tier is not None and self.global_tier.path.save_decode_cache:
                # LMCache saves decode tokens only with save_decode_cache (default false)
                self.global_tier.write(produced, self.config.node, t)
        r.reserved = 0
        if r.pinned:
            cache.unpin(r.pinned)
            r.pinned = []
        out.append(EngineEvent("finished", t, spec, self.name, self._timing(r, t)))

    def _timing(self, r: _Req, finish_s: float) -> RequestTiming:
        bt = self.config.block_tokens
        local, glob = r.local_blocks * bt, r.global_blocks * bt
        return RequestTiming(
            arrival_s=r.arrival_s,
            admitted_s=r.admitted_s,
            loaded_s=r.loaded_s,
            first_token_s=r.first_s,
            finish_s=finish_s,
            local_hit_tokens=local,
            global_hit_tokens=glob,
            computed_tokens=r.spec.prompt_tokens - local - glob,
            output_tokens=r.spec.output_tokens,
        )
