"""The faults of ``smetric chaos``: each runs against a live :class:`ChaosStack` and returns rows
(fault, expected, observed, passed, guard) with the figures it measured. :data:`FAULTS` is the
run order (``cli.FAULTS`` adds other modules' faults)."""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import TYPE_CHECKING

from smetric.bench.chaos.bodies import hostile_bodies
from smetric.bench.chaos.fairness import body_hogs
from smetric.bench.chaos.frozen import endpoint_stop, endpoint_stop_burst
from smetric.bench.chaos.gateway import prefills_on, upload_bounds, while_picker_dead
from smetric.bench.chaos.guards import (
    CUT_STREAM,
    FAIL_CLOSE,
    GATEWAY_PINGS,
    KV_SEQUENCE,
    KV_STORE_CAP,
    SCRAPE_CHECKS,
    STATE_FILE,
)
from smetric.bench.chaos.headers import hostile_headers_and_paths, long_prefill, protocol_errors
from smetric.bench.chaos.row import Fault, Row
from smetric.bench.chaos.stack import NO_DONE, ChaosStack, Reply, chat
from smetric.bench.chaos.stale import stale_row, while_down
from smetric.bench.chaos.uploads import slow_uploads

if TYPE_CHECKING:
    from smetric.epp.kvevents.store import BlockStore
    from smetric.epp.kvevents.subscriber import KvEventManager

LONG_TOKENS = 20_000  # a stream that is still running when the fault hits
KEEPALIVE_BOUND_S = 2 * 1.0 + 1.5  # EnvoyOptions.picker_keepalive_s interval + timeout, plus slack


async def picker_stop(st: ChaosStack, quick: bool) -> list[Row]:
    st.signal("picker", signal.SIGSTOP)
    try:
        r = await st.post(chat("stop", 0), timeout_s=KEEPALIVE_BOUND_S * 4)
    finally:
        st.signal("picker", signal.SIGCONT)
    await asyncio.sleep(0.5)
    after = await st.post(chat("stop", 0))
    ok = 500 <= r.status < 600 and r.elapsed_s < KEEPALIVE_BOUND_S and after.status == 200
    return [
        Row(
            "picker SIGSTOP",
            f"5xx within {KEEPALIVE_BOUND_S:.1f} s (PING keepalive), 200 after SIGCONT",
            f"{r.status or r.error} after {r.elapsed_s:.2f} s; after SIGCONT {after.status}",
            ok,
            GATEWAY_PINGS,
        )
    ]


async def picker_kill_and_restart(st: ChaosStack, quick: bool) -> list[Row]:
    rows = []
    for sig, label in ((signal.SIGTERM, "SIGTERM"), (signal.SIGKILL, "SIGKILL")):
        n = 12 if quick else 30
        sessions = [f"{label}-s{i}" for i in range(n)]
        for s in sessions:  # turn 0: placed; turn 1: the warm picker's choice
            await st.post(chat(s, 0))
        warm = {s: (await st.post(chat(s, 1))).served for s in sessions}
        await asyncio.sleep(st.settings.state_interval_ms / 1000.0 * 2.5)  # a periodic snapshot ran
        if sig == signal.SIGKILL:
            await st.kill("picker")
            down = await st.post(chat("down", 0), timeout_s=30)
            closed, seen = await while_picker_dead(st)
            rows.append(
                Row(
                    "picker SIGKILL",
                    "5xx promptly (< 3 s) while down, also a GET without a body and a POST through "
                    "a BUFFERED gateway (no engine answers)",
                    f"{down.status or down.error} after {down.elapsed_s:.2f} s; {seen}",
                    500 <= down.status < 600 and down.elapsed_s < 3.0 and closed,
                    FAIL_CLOSE,
                )
            )
        else:
            await st.sup.stop("picker")  # SIGTERM: graceful, final snapshot
        t0 = time.monotonic()
        await st.start_picker()
        restart_s = time.monotonic() - t0
        after = {s: (await st.post(chat(s, 2))).served for s in sessions}
        same = sum(1 for s in sessions if after[s] and after[s] == warm[s])
        share = same / n
        rows.append(
            Row(
                f"picker restart ({label}): session stickiness",
                ">= 95 % of sessions routed where the warm picker sent them",
                f"{same}/{n} = {share:.0%} (restart {restart_s:.1f} s)",
                share >= 0.95,
                STATE_FILE,
            )
        )
    return rows


async def endpoint_kill(st: ChaosStack, quick: bool) -> list[Row]:
    # a long stream, cut by SIGKILL of the engine serving it mid-response
    victim, long_req = await _long_stream(st, "kill", 60.0)
    prefilling = await prefills_on(st, victim)  # the retries row: reset before their response
    await st.kill(victim)
    cut = await long_req
    i = int(victim.removeprefix("engine"))
    replies = await asyncio.gather(*(st.post(chat(f"kill-{i}", 0)) for i in range(12)))
    retried = await prefilling.row(st, replies)
    down = await while_down(st, st.endpoints[i])
    await st.restart_engine(victim)
    await st.wait_fresh()
    back = await asyncio.gather(*(st.post(chat(f"back-{n}", 0)) for n in range(9)))
    return [
        Row(
            "endpoint SIGKILL mid-stream",
            "the client sees a transport error (the gateway resets the stream), not a clean end",
            f"{cut.status} from {_name(st, cut.served)}, first byte {cut.first_byte_s or 0:.2f} s: "
            f"{cut.error or 'clean end'} after {cut.elapsed_s:.2f} s",
            cut.served == st.endpoints[i] and bool(cut.error) and cut.error != NO_DONE,
            CUT_STREAM,
        ),
        retried,
        stale_row(st, down, list(back)),
    ]


async def _long_stream(st: ChaosStack, tag: str, timeout_s: float) -> tuple[str, asyncio.Task[Reply]]:
    return await st.long_stream(tag, timeout_s, LONG_TOKENS)


def _name(st: ChaosStack, served: str) -> str:
    return f"engine{st.endpoints.index(served)}" if served in st.endpoints else (served or "-")


async def hostile_metrics(st: ChaosStack, quick: bool) -> list[Row]:
    rows = []
    for mode in ("garbage", "nan", "huge"):
        st.hostile.mode = mode
        log_before = st.picker_log().count("\n")
        scrapes_before = st.hostile.scrapes
        await asyncio.sleep(2.0)
        replies = await asyncio.gather(*(st.post(chat(f"{mode}-{i}", 0)) for i in range(6)))
        stale = await st.picker_metric("smetric_epp_stale_endpoints")
        new_lines = st.picker_log().count("\n") - log_before
        ok = all(r.status == 200 and r.served != st.hostile.address for r in replies) and stale == 1.0
        rows.append(
            Row(
                f"{mode} /metrics page",
                "only that endpoint stale, requests 200 elsewhere, <= 2 log lines",
                f"stale={stale:g}, {sum(r.status == 200 for r in replies)}/6 ok, "
                f"{st.hostile.scrapes - scrapes_before} scrapes -> {new_lines} log lines",
                ok and new_lines <= 2,
                SCRAPE_CHECKS,
            )
        )
    st.hostile.mode = "garbage"
    return rows


async def kv_events(st: ChaosStack, quick: bool) -> list[Row]:
    """The picker's ZMQ subscriber + block store, in this process, against a hostile publisher (a
    thread, so the flood itself does not run on the event loop being measured)."""
    from smetric.epp.kvevents.store import BlockStore
    from smetric.epp.kvevents.subscriber import KvEventManager

    address = "10.0.0.1:8000"
    gaps: list[str] = []
    store = BlockStore(capacity=lambda _: 4096)  # what the engine's cache_config_info would say
    cap = store.max_blocks(address)  # the bound the row holds the store to, guard on or off
    with _kv_guards_off(st):
        manager = KvEventManager(store, gaps.append)
        return await _kv_flood(quick, address, store, cap, gaps, manager)


@contextmanager
def _kv_guards_off(st: ChaosStack) -> Iterator[None]:
    """The picker-process patches of the disabled KV guards (chaos.unguarded), applied in this
    process for the duration of the in-process KV row, then undone."""
    from smetric.bench.chaos.unguarded import PATCHES
    from smetric.epp.kvevents.store import BlockStore
    from smetric.epp.kvevents.subscriber import SequenceTracker

    saved = BlockStore.max_blocks, SequenceTracker.observe
    try:
        for g in st.settings.guards_off:
            if g.name in (KV_STORE_CAP, KV_SEQUENCE):
                for name in g.picker_patches:
                    PATCHES[name]()
        yield
    finally:
        BlockStore.max_blocks, SequenceTracker.observe = saved  # type: ignore[method-assign]


async def _kv_flood(
    quick: bool, address: str, store: BlockStore, cap: int, gaps: list[str], manager: KvEventManager
) -> list[Row]:
    import msgpack  # type: ignore[import-untyped]
    import zmq

    from smetric.bench.procs import free_port
    from smetric.epp.contracts import EndpointInfo

    ctx = zmq.Context()
    pub = ctx.socket(zmq.PUB)
    port = free_port()
    pub.bind(f"tcp://127.0.0.1:{port}")
    manager.sync([EndpointInfo(address, kv_events_endpoint=f"tcp://127.0.0.1:{port}")])
    await asyncio.sleep(0.5)  # slow joiner

    def batch(hashes: list[int]) -> bytes:
        events = [{"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": None, "token_ids": [],
                   "block_size": 16, "lora_id": None, "medium": "GPU"}]  # fmt: skip
        return bytes(msgpack.packb([time.time(), events, 0]))

    n_batches = 200 if quick else 1000
    payloads = [batch(list(range(seq * 10_000, (seq + 1) * 10_000))) for seq in range(n_batches)]

    def publish() -> None:
        for seq, payload in enumerate(payloads):  # a flood: 10k hashes per batch
            pub.send_multipart([b"kv", seq.to_bytes(8, "big"), payload])
        pub.send_multipart([b"kv", (n_batches + 5).to_bytes(8, "big"), batch([1, 2, 3])])  # a gap

    lag, size = [0.0], [0]

    async def ticker() -> None:
        while True:
            t = time.monotonic()
            await asyncio.sleep(0.01)
            lag[0] = max(lag[0], time.monotonic() - t - 0.01)
            size[0] = max(size[0], store.size(address))

    tick = asyncio.create_task(ticker())
    await asyncio.to_thread(publish)
    deadline = time.monotonic() + 15.0
    while not gaps and time.monotonic() < deadline:  # the subscriber works through the flood
        await asyncio.sleep(0.1)
    await asyncio.sleep(0.5)
    tick.cancel()
    await manager.stop()
    pub.close(0)
    ctx.destroy(0)
    return [
        Row(
            "KV-event flood",
            f"block store capped at the engine's blocks x1.25 ({cap}), event loop keeps running (lag < 0.5 s)",
            f"{n_batches * 10_000:,} hashes sent -> at most {size[0]:,} kept, {store.evicted:,} evicted; "
            f"worst loop lag {lag[0] * 1000:.0f} ms",
            size[0] <= cap and lag[0] < 0.5,
            KV_STORE_CAP,
        ),
        Row(  # the message size limit: chaos.state.kv_message_first
            "KV-event sequence gap",
            "gap counted and the endpoint resynchronised",
            f"{len(gaps)} gap(s) reported",
            len(gaps) >= 1,
            KV_SEQUENCE,
        ),
    ]


FAULTS: tuple[Fault, ...] = (
    hostile_headers_and_paths,
    protocol_errors,
    hostile_bodies,
    body_hogs,
    slow_uploads,
    upload_bounds,
    hostile_metrics,
    kv_events,
    long_prefill,
    picker_stop,
    picker_kill_and_restart,
    endpoint_kill,
    endpoint_stop,
    endpoint_stop_burst,
)


__all__ = ["FAULTS", "Fault", "Reply", "Row"]
