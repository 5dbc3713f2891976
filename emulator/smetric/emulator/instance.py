"""One emulated vLLM instance: the shared engine model driven in wall-clock time.

The driver task is the only code that advances the engine: it sleeps until the engine's next
state change (or the next streaming flush while requests decode, every ``stream_interval_s``),
advances the engine to "now" converted to engine time, hands produced tokens to the waiting
HTTP handlers, and publishes the KV events the engine's cache emitted. Engine time runs
``1 / (time_scale * slowdown)`` times as fast as the wall clock. Idle, it waits on an event that
``submit`` sets -- no polling.
"""

from __future__ import annotations

import asyncio
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from itertools import count

from smetric.emulator.blockmap import BlockMap, to_pieces
from smetric.emulator.engine_adapter import SafeInstance
from smetric.emulator.faults import FaultState
from smetric.emulator.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KVCacheEvent,
    KvEventPublisher,
)
from smetric.emulator.metrics import InstanceMetrics
from smetric.emulator.prompt import PreparedPrompt, PreparedRequest, Prompter
from smetric.emulator.protocol import ApiError
from smetric.engine import EngineEvent, EngineRequest, Piece


@dataclass(eq=False, slots=True)
class RequestHandle:
    """A request in flight. ``tokens`` yields output token indices 0..n-1, then ``None``
    (also ``None`` early when the request is aborted)."""

    request_id: str
    engine_id: str
    prompt: PreparedPrompt
    output_tokens: int
    block_ids: list[int]
    arrival_wall_s: float
    tokens: asyncio.Queue[int | None] = field(default_factory=asyncio.Queue)
    sent: int = 0
    cached_tokens: int = 0
    first_token_wall_s: float = math.nan
    done: bool = False
    # Modelled engine time (engine seconds, i.e. model seconds) from the engine's arrival of the
    # request to its first token / its last token: the time a real engine would have taken.
    engine_ttft_s: float = math.nan
    engine_e2e_s: float = math.nan


class KvEventCollector:
    """The engine cache's :class:`KvEventSink`: translates id pieces to vLLM events at once
    (the block map changes as blocks are evicted), kept until the driver publishes them."""

    def __init__(self, blocks: BlockMap, block_size: int) -> None:
        self.blocks = blocks
        self.block_size = block_size
        self.pending: list[KVCacheEvent] = []

    def blocks_stored(self, pieces: Sequence[Piece]) -> None:
        for chain in self.blocks.stored(pieces):
            tokens = [t for info in chain for t in info.token_ids]
            self.pending.append(
                BlockStored(
                    block_hashes=[info.block_hash for info in chain],
                    parent_block_hash=chain[0].parent_hash,
                    token_ids=tokens,
                    block_size=self.block_size,
                )
            )

    def blocks_removed(self, pieces: Sequence[Piece]) -> None:
        hashes = self.blocks.removed(pieces)
        if hashes:
            self.pending.append(BlockRemoved(block_hashes=hashes))

    def take(self) -> list[KVCacheEvent]:
        out, self.pending = self.pending, []
        return out


class _Clock:
    """Engine time <-> event-loop time, re-anchored whenever the speed factor changes."""

    def __init__(self, loop: asyncio.AbstractEventLoop, time_scale: float) -> None:
        self._loop = loop
        self._scale = time_scale
        self._factor = 1.0
        self._wall0 = loop.time()
        self._eng0 = 0.0

    def set_factor(self, factor: float) -> None:
        if factor != self._factor:
            now = self._loop.time()
            self._eng0, self._wall0, self._factor = self.engine_at(now), now, factor

    def now(self) -> float:
        return self._loop.time()

    @property
    def wall_per_engine_s(self) -> float:
        return self._scale * self._factor

    def engine_at(self, wall_s: float) -> float:
        return self._eng0 + (wall_s - self._wall0) / self.wall_per_engine_s

    def wall_at(self, engine_s: float) -> float:
        return self._wall0 + (engine_s - self._eng0) * self.wall_per_engine_s


class EmulatedInstance:
    """Engine + request bookkeeping + metrics + KV-event publishing of one instance."""

    def __init__(
        self,
        name: str,
        engine: SafeInstance,
        blocks: BlockMap,
        collector: KvEventCollector,
        prompter: Prompter,
        metrics: InstanceMetrics,
        publisher: KvEventPublisher | None,
        faults: FaultState,
        time_scale: float,
        stream_interval_s: float = 0.01,
    ) -> None:
        self.name = name
        self.engine = engine
        self.blocks = blocks
        self.prompter = prompter
        self.metrics = metrics
        self.publisher = publisher
        self.faults = faults
        self._collector = collector
        self._time_scale = time_scale
        self._stream_interval_s = stream_interval_s
        self._live: dict[str, RequestHandle] = {}
        self._ids = count()
        self._wake = asyncio.Event()
        self._clock: _Clock | None = None
        self._advanced_e = 0.0  # engine time of the driver's last advance
        self.lag_s = 0.0  # latest a timed wake-up of the driver came (event-loop lag, diagnostics)

    # ------------------------------------------------------------------ API for handlers
    @property
    def clock(self) -> _Clock:
        if self._clock is None:
            self._clock = _Clock(asyncio.get_running_loop(), self._time_scale)
        return self._clock

    def check_fits(self, total_tokens: int) -> None:
        """400 when ``prompt + output`` can never fit this instance's KV cache."""
        limit = self.engine.max_tokens()
        if total_tokens > limit:
            raise ApiError(
                400, f"prompt + max_tokens = {total_tokens} tokens exceed the KV cache ({limit} tokens)"
            )

    def submit(
        self, prepared: PreparedRequest, request_id: str, received_wall_s: float | None = None
    ) -> RequestHandle:
        """Queue a request in the engine. ``received_wall_s`` (event-loop time the HTTP request
        arrived) is its arrival time, so parsing/tokenizing/hashing is not modelled as engine time
        -- unless the driver advanced the engine past it meanwhile (busy instance), then it
        arrives at that point."""
        if self.faults.dead:
            raise ApiError(503, "engine is dead")
        bs = self.engine.config.block_tokens
        prompt, output_tokens = prepared.prompt, prepared.output_tokens
        ids = self.blocks.intern(prepared.block_hashes, prepared.sequence, bs)
        n_prompt = prompt.num_tokens // bs
        engine_id = f"{next(self._ids)}"
        spec = EngineRequest(
            request_id=engine_id,
            prompt_tokens=prompt.num_tokens,
            output_tokens=output_tokens,
            prompt_pieces=to_pieces(ids[:n_prompt]),
            output_pieces=to_pieces(ids[n_prompt:]),
        )
        clock = self.clock
        arrival = clock.now() if received_wall_s is None else received_wall_s
        handle = RequestHandle(request_id, engine_id, prompt, output_tokens, ids, arrival)
        try:
            # Never before the driver's last advance (the engine's contract: times never go back).
            self.engine.submit(spec, max(clock.engine_at(arrival), self._advanced_e, self.engine.now_s))
        except ValueError as exc:
            self.blocks.release(ids)
            raise ApiError(400, str(exc)) from None
        self.faults.on_accept()
        self._live[engine_id] = handle
        self._wake.set()
        return handle

    def abort(self, handle: RequestHandle) -> None:
        """Drop a request that is not finished (client gone, or the instance died); idempotent."""
        if handle.done:
            return
        self.engine.abort(handle.engine_id)
        self._close(handle)
        self.metrics.success_abort.inc()
        self._wake.set()

    def fault_changed(self) -> None:
        """Apply a fault switch now: abort everything if dead, and let the driver re-anchor its
        clock at once if the speed changed."""
        if self.faults.dead:
            self.abort_all()
        self._wake.set()

    def abort_all(self) -> None:
        for handle in list(self._live.values()):
            self.abort(handle)

    def reset_prefix_cache(self) -> bool:
        """vLLM's ``POST /reset_prefix_cache``: drop every cached block and publish
        ``AllBlocksCleared``. Refused (False) while requests are in the engine, as vLLM does."""
        engine = self.engine
        if engine.num_running or engine.num_waiting:
            return False
        earlier = self._collector.take()
        engine.cache.clear()
        self._collector.take()  # the per-block removals are summarised by one AllBlocksCleared
        self._collector.pending.extend([*earlier, AllBlocksCleared()])
        self._wake.set()
        return True

    def render_metrics(self) -> bytes:
        m = self.metrics
        m.running.set(self.engine.num_running)
        m.waiting.set(self.engine.num_waiting)
        m.kv_usage.set(self.engine.kv_usage)
        return m.render()

    # ------------------------------------------------------------------ driver
    def _close(self, handle: RequestHandle) -> None:
        handle.done = True
        self._live.pop(handle.engine_id, None)
        self.blocks.release(handle.block_ids)
        handle.tokens.put_nowait(None)

    def _deliver(self, handle: RequestHandle, upto: int) -> None:
        upto = min(upto, handle.output_tokens)
        if upto > handle.sent:
            for k in range(handle.sent, upto):
                handle.tokens.put_nowait(k)
            self.metrics.generation_tokens.inc(upto - handle.sent)
            handle.sent = upto

    def _on_event(self, ev: EngineEvent, wall_now: float) -> None:
        handle = self._live.get(ev.request.request_id)
        if handle is None:
            return
        t = ev.timing
        m = self.metrics
        if ev.kind == "first_token":
            handle.cached_tokens = t.local_hit_tokens + t.global_hit_tokens
            handle.first_token_wall_s = wall_now
            handle.engine_ttft_s = t.ttft_s
            m.prefix_queries.inc(handle.prompt.num_tokens)
            m.prefix_hits.inc(t.local_hit_tokens)
            m.prompt_tokens.inc(handle.prompt.num_tokens)
            m.ttft.observe(wall_now - handle.arrival_wall_s)
            self._deliver(handle, 1)
        if ev.kind == "finished":
            self._deliver(handle, handle.output_tokens)
            handle.engine_e2e_s = t.finish_s - t.arrival_s
            m.e2e.observe(wall_now - handle.arrival_wall_s)
            if handle.output_tokens > 1:
                itl = (wall_now - handle.first_token_wall_s) / (handle.output_tokens - 1)
                for _ in range(handle.output_tokens - 1):
                    m.itl.observe(itl)
            m.success_length.inc()
            self._close(handle)

    async def run(self) -> None:
        """The driver loop (one task per instance)."""
        loop = asyncio.get_running_loop()
        clock = self.clock
        engine = self.engine
        while True:
            clock.set_factor(self.faults.time_factor)
            wall = loop.time()
            now_e = clock.engine_at(wall)
            self._advanced_e = max(self._advanced_e, now_e)
            for ev in engine.advance(now_e):
                self._on_event(ev, wall)
            decoding = engine.decoded_tokens(now_e)
            for engine_id, n in decoding.items():
                handle = self._live.get(engine_id)
                if handle is not None:
                    self._deliver(handle, n)
            events = self._collector.take()
            if events and self.publisher is not None:
                await self.publisher.publish(events)
            nxt = engine.next_event_s()
            self._wake.clear()
            if math.isinf(nxt) and not decoding:
                await self._wake.wait()
                continue
            delay = clock.wall_at(nxt) - loop.time() if not math.isinf(nxt) else math.inf
            if decoding:
                delay = min(delay, self._stream_interval_s)
            if delay > 0:
                target = loop.time() + delay
                try:
                    await asyncio.wait_for(self._wake.wait(), delay)
                except TimeoutError:
                    self.lag_s = max(self.lag_s, loop.time() - target)
