"""ZMQ SUB subscribers to the engines' KV-event publishers (pyzmq asyncio), one per endpoint.

Frames are ``[topic, seq (8-byte big-endian), msgpack payload]``. The subscriber checks that ``seq``
increases by one per batch; anything else (a lost batch at the publisher's high-water mark, a
reconnect, an engine restart that starts again at 0) is a gap: the endpoint's block set is reset
(:meth:`BlockStore.resync`) and ``on_gap(address)`` is called so the request path can count it.
A malformed message is handled the same way. Blocks stored before the subscriber connected are not
known (vLLM's optional replay socket is not used); the set fills as the engine stores blocks.

A message larger than ``ZMQ_MAXMSGSIZE`` is a protocol error to libzmq: it closes the connection
and, unlike after a network error, never reconnects that socket (the SUB would then wait forever
with nothing reported). Each socket therefore carries a monitor; on ``ZMQ_EVENT_DISCONNECTED`` the
subscriber reports a gap (the endpoint's blocks are reset and ``on_gap`` counts it), closes the
socket and connects a fresh one after :data:`RECONNECT_DELAY_S`. ``KvEventSubscriber.reconnects``
counts these.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
from collections.abc import Callable, Sequence

import zmq
import zmq.asyncio
from zmq.utils.monitor import parse_monitor_message

from smetric.core.stopping import cancel_and_wait
from smetric.epp.contracts import EndpointInfo
from smetric.epp.kvevents.events import KvEventDecodeError, decode_payload
from smetric.epp.kvevents.store import BlockStore

log = logging.getLogger(__name__)

GapCallback = Callable[[str], None]

# Bounds. A vLLM batch is one engine step's events: a 128k-token prompt stores ~8k blocks of 16
# tokens, ~0.4 MB of msgpack with its token ids; 4 MiB is 10x that (stated assumption). A larger
# message makes libzmq drop the connection; the monitor sees it and the subscriber reports a gap and
# connects again (module docstring). The receive queue holds at most RCVHWM messages (SUB drops past
# it: a gap again). The receive loop yields to the event loop after every message (a ready socket
# never suspends), so a flood delays the request path by one batch at most.
MAX_MESSAGE_BYTES = 4 * 1024 * 1024
RCVHWM = 10_000
# Pause before a dropped connection is replaced: a publisher that keeps sending oversized messages
# costs one reconnect per pause at most (libzmq's own default reconnect interval is 100 ms).
RECONNECT_DELAY_S = 0.1
# The monitor event after which the socket is replaced (a dropped connection).
RECONNECT_ON: int = int(zmq.EVENT_DISCONNECTED)


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
        self.reconnects = 0

    def _gap(self, why: str) -> None:
        self.gaps += 1
        self._store.resync(self.address)
        log.warning("kv events from %s: %s; block set reset until refilled", self.address, why)
        if self._on_gap is not None:
            self._on_gap(self.address)

    def dropped(self) -> None:
        """The connection closed (an oversized or malformed frame, or the publisher went away):
        whatever was in flight is lost, so this is a gap; the next batch starts a new sequence."""
        self.reconnects += 1
        self._gap("connection dropped (a message over the size limit, bad framing, or the publisher left)")
        self._seq.last = None

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

    def __init__(
        self,
        store: BlockStore,
        on_gap: GapCallback | None = None,
        max_message_bytes: int = MAX_MESSAGE_BYTES,
    ) -> None:
        self._store = store
        self._on_gap = on_gap
        self._max_message_bytes = max_message_bytes if max_message_bytes > 0 else -1  # -1: libzmq's "none"
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
        # The endpoint's blocks are kept: a restarted picker may have restored them from its state
        # file before discovery named the endpoint (a removed endpoint's set went with _drop).
        sub = KvEventSubscriber(address, self._store, self._on_gap)
        self.subscribers[address] = sub
        task = asyncio.get_running_loop().create_task(
            self._run(sub, zmq_endpoint), name=f"kv-events:{address}"
        )
        self._tasks[address] = (zmq_endpoint, task)
        log.info("kv events: subscribed to %s for %s", zmq_endpoint, address)

    def _connect(self, zmq_endpoint: str) -> tuple[zmq.asyncio.Socket, zmq.asyncio.Socket]:
        """A SUB socket connected to ``zmq_endpoint`` and its monitor (disconnect events only)."""
        if self._ctx is None:
            self._ctx = zmq.asyncio.Context()
        sock = self._ctx.socket(zmq.SUB)
        sock.setsockopt(zmq.LINGER, 0)
        sock.setsockopt(zmq.RCVHWM, RCVHWM)
        sock.setsockopt(zmq.MAXMSGSIZE, self._max_message_bytes)
        sock.setsockopt(zmq.SUBSCRIBE, b"")
        monitor = sock.get_monitor_socket(zmq.EVENT_DISCONNECTED)
        sock.connect(zmq_endpoint)
        return sock, monitor

    def _drop(self, address: str) -> None:
        _, task = self._tasks.pop(address)
        task.cancel()  # its finally closes the socket
        self._closing.add(task)
        task.add_done_callback(self._closing.discard)
        self.subscribers.pop(address, None)
        self._store.remove(address)
        log.info("kv events: unsubscribed %s", address)

    async def _run(self, sub: KvEventSubscriber, zmq_endpoint: str) -> None:
        while True:
            sock, monitor = self._connect(zmq_endpoint)
            try:
                await self._receive(sub, sock, monitor)
            finally:
                with contextlib.suppress(zmq.ZMQError):
                    sock.disable_monitor()
                monitor.close(linger=0)
                sock.close(linger=0)
            log.warning(
                "kv events from %s: connection to %s dropped; reconnecting", sub.address, zmq_endpoint
            )
            sub.dropped()
            await asyncio.sleep(RECONNECT_DELAY_S)

    @staticmethod
    async def _receive(sub: KvEventSubscriber, sock: zmq.asyncio.Socket, monitor: zmq.asyncio.Socket) -> None:
        """Apply batches until the monitor reports the connection dropped (then return)."""
        poller = zmq.asyncio.Poller()
        poller.register(sock, zmq.POLLIN)
        poller.register(monitor, zmq.POLLIN)
        while True:
            ready = dict(await poller.poll())
            if sock in ready:  # what arrived before a disconnect is applied before it is reported
                while True:
                    try:
                        frames = await sock.recv_multipart(flags=zmq.NOBLOCK)
                    except zmq.Again:
                        break
                    try:
                        sub.handle(frames)
                    except Exception:  # a bug must not silence the endpoint's events for good
                        log.exception("kv events from %s: unexpected error; resynchronising", sub.address)
                        sub.reset()
                    await asyncio.sleep(0)  # a ready socket never suspends: let requests run
                continue
            if monitor in ready:
                event = parse_monitor_message(await monitor.recv_multipart())
                if event["event"] == RECONNECT_ON:
                    return

    async def stop(self) -> None:
        for address in list(self._tasks):
            self._drop(address)
        await cancel_and_wait(*self._closing)  # cancelled already by _drop
        if self._ctx is not None:
            self._ctx.destroy(linger=0)
            self._ctx = None
