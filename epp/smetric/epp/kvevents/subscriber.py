"""ZMQ SUB subscribers to the engines' KV-event publishers (pyzmq asyncio), one per endpoint.

Frames are ``[topic, seq (8-byte big-endian), msgpack payload]``. The subscriber checks that ``seq``
increases by one per batch; anything else (a lost batch at the publisher's high-water mark, a
reconnect, an engine restart that starts again at 0) is a gap: the endpoint's block set is reset
(:meth:`BlockStore.resync`) and ``on_gap(address)`` is called so the request path can count it.
A malformed message is handled the same way. Blocks stored before the subscriber connected are not
known (vLLM's optional replay socket is not used); the set fills as the engine stores blocks.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

import zmq
import zmq.asyncio

from smetric.epp.contracts import EndpointInfo
from smetric.epp.kvevents.events import KvEventDecodeError, decode_payload
from smetric.epp.kvevents.store import BlockStore

log = logging.getLogger(__name__)

GapCallback = Callable[[str], None]

# Bounds (issue 12). A vLLM batch is one engine step's events: a 128k-token prompt stores ~8k
# blocks of 16 tokens, ~0.4 MB of msgpack with its token ids; 4 MiB is 10x that (stated
# assumption). A larger message makes ZMQ drop the connection (it reconnects; the next batch is a
# sequence gap and the endpoint resyncs). The receive queue holds at most RCVHWM messages (SUB
# drops past it: a gap again). The receive loop yields to the event loop after every message (a
# ready socket never suspends; one 10k-hash batch costs ~10 ms to decode and apply), so a flood
# delays the request path by one batch at most.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
RCVHWM = 10_000


class SequenceTracker:
    """Per-publisher sequence check: ``observe(seq)`` is ``False`` when batches were lost."""

    def __init__(self) -> None:
        self.last: int | None = None

    def observe(self, seq: int) -> bool:
        ok = self.last is None or seq == self.last + 1
        self.last = seq
        return ok


class KvEventSubscriber:
    """One endpoint's subscription; :meth:`handle` is the synchronous, testable core."""

    def __init__(self, address: str, store: BlockStore, on_gap: GapCallback | None = None) -> None:
        self.address = address
        self._store = store
        self._on_gap = on_gap
        self._seq = SequenceTracker()
        self.batches = 0
        self.gaps = 0

    def _gap(self, why: str) -> None:
        self.gaps += 1
        self._store.resync(self.address)
        log.warning("kv events from %s: %s; block set reset until refilled", self.address, why)
        if self._on_gap is not None:
            self._on_gap(self.address)

    def reset(self) -> None:
        """Forget the endpoint's blocks and the sequence (the next batch starts afresh)."""
        self._store.resync(self.address)
        self._seq.last = None

    def handle(self, frames: Sequence[bytes]) -> None:
        if len(frames) != 3 or len(frames[1]) != 8:
            self._gap(f"malformed message ({len(frames)} frames)")
            self._seq.last = None
            return
        seq = int.from_bytes(frames[1], "big")
        expected = None if self._seq.last is None else self._seq.last + 1
        if not self._seq.observe(seq):
            self._gap(f"sequence gap (expected {expected}, got {seq})")
        try:
            batch = decode_payload(frames[2])
        except KvEventDecodeError as exc:
            self._gap(f"undecodable batch {seq}: {exc}")
            return
        self._store.apply(self.address, batch.events)
        self.batches += 1


class KvEventManager:
    """Keeps one SUB socket per endpoint that advertises a publisher; tears removed ones down."""

    def __init__(self, store: BlockStore, on_gap: GapCallback | None = None) -> None:
        self._store = store
        self._on_gap = on_gap
        self._ctx: zmq.asyncio.Context | None = None
        self._tasks: dict[str, tuple[str, asyncio.Task[None]]] = {}
        self._closing: set[asyncio.Task[None]] = set()
        self.subscribers: dict[str, KvEventSubscriber] = {}

    def sync(self, endpoints: Sequence[EndpointInfo]) -> None:
        """Subscribe to new publishers, drop removed or changed ones (call from the event loop)."""
        wanted = {e.address: e.kv_events_endpoint for e in endpoints if e.kv_events_endpoint}
        for address, (zmq_endpoint, _) in list(self._tasks.items()):
            if wanted.get(address) != zmq_endpoint:
                self._drop(address)
        for address, zmq_endpoint in wanted.items():
            if address not in self._tasks:
                self._add(address, zmq_endpoint)

    def _add(self, address: str, zmq_endpoint: str) -> None:
        if self._ctx is None:
            self._ctx = zmq.asyncio.Context()
        sub = KvEventSubscriber(address, self._store, self._on_gap)
        sock = self._ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, RCVHWM)
        sock.setsockopt(zmq.MAXMSGSIZE, MAX_MESSAGE_BYTES)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        sock.connect(zmq_endpoint)
        self._store.resync(address)
        self.subscribers[address] = sub
        task = asyncio.get_running_loop().create_task(self._run(sub, sock), name=f"kv-events:{address}")
        self._tasks[address] = (zmq_endpoint, task)
        log.info("kv events: subscribed to %s for %s", zmq_endpoint, address)

    def _drop(self, address: str) -> None:
        _, task = self._tasks.pop(address)
        task.cancel()  # its finally closes the socket
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        self.subscribers.pop(address, None)
        self._store.remove(address)
        log.info("kv events: unsubscribed %s", address)

    @staticmethod
    async def _run(sub: KvEventSubscriber, sock: zmq.asyncio.Socket) -> None:
        try:
            while True:
                frames = await sock.recv_multipart()
                await asyncio.sleep(0)  # a ready socket never suspends: let requests run
                try:
                    sub.handle(frames)
                except Exception:  # a bug must not silence the endpoint's events for good
                    log.exception("kv events from %s: unexpected error; resynchronising", sub.address)
                    sub.reset()
        finally:
            sock.close(linger=0)

    async def stop(self) -> None:
        for address in list(self._tasks):
            self._drop(address)
        for task in list(self._closing):
            with contextlib.suppress(asyncio.CancelledError):
                await task
        if self._ctx is not None:
            self._ctx.destroy(linger=0)
            self._ctx = None
