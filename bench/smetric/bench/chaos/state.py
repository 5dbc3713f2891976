"""Chaos faults on the picker's state: KV-event messages over the size limit, many-message agent
bodies on both prefix indexes, and picker replicas restarting behind one gateway.

* :func:`kv_message_first`: the picker's KV-event subscriber (in this process, against a real ZMQ
  publisher) gets an 8 MiB *valid* batch as its first message, then ordinary batches. The limit
  must drop it (none of its hashes applied, a gap counted) and the subscriber must connect again
  (the batches after it applied) -- libzmq drops an oversized connection and never reconnects it.
* :func:`agent_bodies`: 8 concurrent 15.5 MiB agent transcripts (~250k short messages each, the
  shape that costs the most after parsing) through the gateway, once with the approximate index and
  once with the precise one (the picker restarted with ``--prefix-index precise``); the picker's RSS
  growth must stay under :data:`BODY_RSS_BOUND_MB`.
* :func:`picker_replica_restart`: what the operator renders -- two precise pickers with
  ``--state-file``, behind one Envoy ext_proc cluster. One is SIGKILLed under load (requests sent
  after its death must all get 200: the gateway opens their streams on the other replica), then
  restarted; follow-up turns must stay on their session's engine.

The in-process KV rows read ``ChaosSettings.guards_off`` and apply the same switch the picker
process would get (the limit flag's value, the reconnect patch).
"""

from __future__ import annotations

import asyncio
import signal
import time
from collections.abc import Iterator
from contextlib import contextmanager

from smetric.bench.chaos.bodies import BUDGET_REFUSAL, agent_body, probed
from smetric.bench.chaos.guards import (
    BODY_BUDGET,
    KV_MESSAGE_LIMIT,
    KV_RECONNECT,
    PARSE_COST,
    PICKER_RETRY,
    STATE_FILE,
    Guard,
)
from smetric.bench.chaos.row import Fault, Row
from smetric.bench.chaos.stack import ChaosStack, chat
from smetric.bench.procs import free_port

# 8 bodies against the 64 MiB body budget: at most 4 buffered at once, 2 parsed at once. Per body
# the picker holds its bytes plus at most 3x them once keyed and peaks at 10x while parsing
# (tests/unit/epp/test_epp_body_memory.py), so 4 x 4 x 15.5 + 2 x 10 x 15.5 = 558 MB; the bound adds
# nothing for allocator slack (glibc keeps freed arenas): the row fails if the budget is lifted.
BODY_RSS_BOUND_MB = 600.0
LOST_WORKER = b"parse worker"  # in the picker's 503 when a parse worker died or did not start


def _off(st: ChaosStack, name: str) -> bool:
    return any(g.name == name for g in st.settings.guards_off)


# -- KV events ------------------------------------------------------------------------------------


@contextmanager
def _reconnect_off(off: bool) -> Iterator[None]:
    """The ``kv-no-reconnect`` patch (chaos.unguarded), here, for the duration of the row."""
    from smetric.epp.kvevents import subscriber

    saved = subscriber.RECONNECT_ON
    if off:
        subscriber.RECONNECT_ON = 0
    try:
        yield
    finally:
        subscriber.RECONNECT_ON = saved


async def kv_message_first(st: ChaosStack, quick: bool) -> list[Row]:
    import zmq
    import zmq.asyncio

    from smetric.epp.contracts import EndpointInfo
    from smetric.epp.kvevents.store import BlockStore
    from smetric.epp.kvevents.subscriber import MAX_MESSAGE_BYTES, KvEventManager

    def batch(hashes: list[int]) -> bytes:
        events = [{"type": "BlockStored", "block_hashes": hashes, "parent_block_hash": None, "token_ids": [],
                   "block_size": 16, "lora_id": None, "medium": "GPU"}]  # fmt: skip
        return _msgpack([time.time(), events, 0])

    address = "10.0.0.1:8000"
    limit = 0 if _off(st, KV_MESSAGE_LIMIT) else MAX_MESSAGE_BYTES
    ctx = zmq.asyncio.Context()
    pub = ctx.socket(zmq.PUB)
    pub.setsockopt(zmq.LINGER, 0)
    port = pub.bind_to_random_port("tcp://127.0.0.1")
    store = BlockStore()
    gaps: list[str] = []
    seq = 0
    big = list(range(1 << 40, (1 << 40) + 900_000))  # ~8.1 MiB of msgpack: one valid batch

    async def send(payload: bytes) -> None:
        nonlocal seq
        await pub.send_multipart([b"kv", seq.to_bytes(8, "big"), payload])
        seq += 1

    with _reconnect_off(_off(st, KV_RECONNECT)):
        manager = KvEventManager(store, gaps.append, max_message_bytes=limit)
        manager.sync([EndpointInfo(address, kv_events_endpoint=f"tcp://127.0.0.1:{port}")])
        try:
            # The SUB connects asynchronously: the big batch goes once the first probe arrived, so
            # it is the first message after the subscription is live (no deliberate gap before it).
            deadline = time.monotonic() + 5.0
            while not store.size(address) and time.monotonic() < deadline:
                await send(batch([1]))
                await asyncio.sleep(0.05)
            await send(batch(big))
            after: set[int] = set()
            applied_after = 0.0
            t0 = time.monotonic()
            for h in range(2, 2 + (60 if quick else 100)):  # keep observing: 20 batches per second
                after.add(h)
                await send(batch([h]))
                await asyncio.sleep(0.05)
                if not applied_after and after & set(store.blocks(address) or ()):
                    applied_after = time.monotonic() - t0
            blocks = set(store.blocks(address) or ())
            sub = manager.subscribers[address]
            reconnects = sub.reconnects
        finally:
            await manager.stop()
            pub.close(linger=0)
            ctx.term()
    big_applied = big[-1] in blocks
    return [
        Row(
            "KV-event 8 MiB batch as the first message",
            f"dropped at the {MAX_MESSAGE_BYTES >> 20} MiB limit (none of its 900k hashes applied), gap counted",
            f"{'applied' if big_applied else 'dropped'}; {len(gaps)} gap(s), {reconnects} reconnect(s)",
            not big_applied and len(gaps) >= 1,
            KV_MESSAGE_LIMIT,
        ),
        Row(
            "KV events after an oversized message",
            "the subscriber connects again: later batches applied within 2 s",
            f"first later batch applied after {applied_after:.2f} s" if applied_after else "none applied",
            0 < applied_after < 2.0,
            KV_RECONNECT,
        ),
    ]


def _msgpack(value: object) -> bytes:
    import msgspec

    return msgspec.msgpack.encode(value)


def precise_flags(st: ChaosStack) -> list[str]:
    """Picker flags for the precise index on this stack: an endpoints file that names each
    engine's KV-event publisher (its own port) and the index itself."""
    import yaml

    entries: list[object] = []
    for i, address in enumerate(st.endpoints):
        kv = next(a for a in st.emu_argv[f"engine{i}"] if a.startswith("--kv-events-port="))
        entries.append({"address": address, "kv_events": f"tcp://127.0.0.1:{kv.split('=', 1)[1]}"})
    entries.append(st.hostile.address)
    path = st.work / "precise-endpoints.yaml"
    path.write_text(yaml.safe_dump(entries))
    return [f"--endpoints=@{path}", "--prefix-index=precise"]


# -- many-message bodies --------------------------------------------------------------------------


async def _bodies_row(st: ChaosStack, index: str, body: bytes, guard: str, refusal: bool = False) -> Row:
    """``refusal``: at least one body must be refused by the picker's body budget (503)."""
    p = await probed(st, asyncio.gather(*(st.post(body, timeout_s=90) for _ in range(8))))
    replies, rss0, peak, worst_health = p.replies, p.rss0_mb, p.peak_mb, p.worst_health_s
    codes = sorted(r.status for r in replies)
    growth = peak - rss0
    why = sorted({r.body[:70].decode(errors="replace") for r in replies if r.status == 503})
    refused = sum(1 for r in replies if r.status == 503 and BUDGET_REFUSAL in r.body)
    # A parse worker that died or never started is the picker failing the body, not a refusal.
    lost = [
        r.body[:160].decode(errors="replace") for r in replies if r.status == 503 and LOST_WORKER in r.body
    ]
    return Row(
        f"8 concurrent 15.5 MiB agent bodies (~250k messages each), {index} index",
        f"every one answered (503 past the 64 MiB body budget{', at least one,' if refusal else ''} or the "
        f"decision budget; none lost to a parse worker); picker RSS growth < {BODY_RSS_BOUND_MB:.0f} MB",
        f"codes {codes} (400: the engine's context limit); picker RSS {rss0:.0f} -> peak {peak:.0f} MB "
        f"(+{growth:.0f}); worst health {worst_health:.2f} s; {refused} refused by the body budget; 503: {why}"
        + (f"; {len(lost)} lost to a parse worker: {lost[0]}" if lost else ""),
        all(c != 0 for c in codes)
        and growth < BODY_RSS_BOUND_MB
        and (refused >= 1 or not refusal)
        and not lost,
        guard,
    )


async def agent_bodies(st: ChaosStack, quick: bool) -> list[Row]:
    body = agent_body()
    # Approximate index: the 64 MiB body budget and the 2-thread parse pool bound the cost; 8
    # bodies are twice the budget, so the budget refuses some (the RSS bound alone does not see it:
    # the pool and the decision budget bound the memory too).
    rows = [await _bodies_row(st, "approximate", body, BODY_BUDGET, refusal=True)]
    argv = st.picker_argv
    guard_flags = [f for g in st.settings.guards_off for f in g.picker_flags]
    # The default 10 s decision budget (the stack's 3 s is shorter than keying 4M tokens here).
    st.picker_argv = [*argv, *precise_flags(st), "--decision-budget-ms=10000", *guard_flags]
    try:
        await st.sup.stop("picker")
        await st.start_picker()
        rows.append(await _bodies_row(st, "precise", body, PARSE_COST))
    finally:
        st.picker_argv = argv
        await st.sup.stop("picker")
        await st.start_picker()
    return rows


# -- picker replicas --------------------------------------------------------------------------------


async def _start_replica(st: ChaosStack, name: str, ports: tuple[int, int, int]) -> None:
    from smetric.bench.stacks import wait_grpc_serving

    grpc_port, health_port, metrics_port = ports
    guard_flags = [f for g in st.settings.guards_off for f in g.picker_flags]
    argv = [
        *st.picker_argv,
        f"--grpc-port={grpc_port}",
        f"--grpc-health-port={health_port}",
        f"--metrics-port={metrics_port}",
        *precise_flags(st),  # what the operator renders where the engines publish KV events
        f"--state-file={st.work / (name + '-state.json')}",
        *guard_flags,  # a disabled guard's flag still wins
    ]
    await st.sup.start(name, argv, env={"PYTHONHASHSEED": "0"})
    await wait_grpc_serving(f"127.0.0.1:{health_port}", st.sup, st.settings.startup_timeout_s, name)


async def picker_replica_restart(st: ChaosStack, quick: bool) -> list[Row]:
    ports = {name: (free_port(), free_port(), free_port()) for name in ("replica-a", "replica-b")}
    for name, p in ports.items():
        await _start_replica(st, name, p)
    url, _ = await st.start_gateway(
        "envoy-replicas",
        picker_port=ports["replica-a"][0],
        more_picker_ports=(ports["replica-b"][0],),
        pool_endpoints=tuple(st.endpoints),
    )
    await asyncio.sleep(1.0)  # the replicas' first scrapes and KV subscriptions
    n = 12 if quick else 24
    sessions = [f"replica-s{i}" for i in range(n)]
    for s in sessions:
        await st.post(chat(s, 0), url=url)
    warm = {s: (await st.post(chat(s, 1), url=url)).served for s in sessions}
    await asyncio.sleep(st.settings.state_interval_ms / 1000.0 * 2.5)  # a periodic snapshot ran

    after_kill: list[int] = []
    killed = asyncio.Event()

    async def agent(i: int) -> None:
        t = 0
        while not killed.is_set() or len(after_kill) < 40:
            started_after = killed.is_set()
            r = await st.post(chat(f"replica-load-{i}", t % 4, max_tokens=4), url=url, timeout_s=30)
            if started_after:
                after_kill.append(r.status)
            t += 1

    load = [asyncio.create_task(agent(i)) for i in range(4)]
    await asyncio.sleep(1.0)
    st.signal("replica-a", signal.SIGKILL)
    await st.sup.stop("replica-a")  # reaped: its port refuses connections from now on
    killed.set()
    await asyncio.gather(*load)
    t0 = time.monotonic()
    await _start_replica(st, "replica-a", ports["replica-a"])
    restart_s = time.monotonic() - t0
    # The gateway ejected the killed replica (2 s, longer after repeated failures): wait it out so
    # the follow-ups below reach the restarted replica too, not only the warm one.
    await asyncio.sleep(REJOIN_S)
    after = {s: (await st.post(chat(s, 2), url=url)).served for s in sessions}
    same = sum(1 for s in sessions if after[s] and after[s] == warm[s])
    await st.sup.stop("envoy-replicas")
    for name in ports:
        await st.sup.stop(name)
    failed = [c for c in after_kill if c != 200]
    return [
        Row(
            "picker replica SIGKILL (2 precise replicas behind one gateway)",
            "every request sent after the kill gets 200 (its stream opens on the other replica)",
            f"{len(after_kill) - len(failed)}/{len(after_kill)} ok; non-200: {sorted(set(failed)) or 'none'}",
            bool(after_kill) and not failed,
            PICKER_RETRY,
        ),
        Row(
            "picker replica restart: session stickiness",
            ">= 95 % of sessions routed where the warm replicas sent them",
            f"{same}/{n} = {same / n:.0%} (restart {restart_s:.1f} s)",
            same / n >= 0.95,
            STATE_FILE,
        ),
    ]


REJOIN_S = 6.0  # > the gateway's ejection of a failed picker (base 2 s, doubled on a repeat)

FAULTS: tuple[Fault, ...] = (kv_message_first, agent_bodies, picker_replica_restart)

GUARDS: tuple[Guard, ...] = (
    Guard(
        KV_MESSAGE_LIMIT,
        "the KV-event subscriber drops a message over --kv-events-max-message-bytes (4 MiB; ZMQ_MAXMSGSIZE)",
        ("kv_message_first",),
        picker_flags=("--kv-events-max-message-bytes=0",),
    ),
    Guard(
        KV_RECONNECT,
        "the KV-event subscriber's socket monitor replaces a dropped connection (kvevents/subscriber.py "
        "RECONNECT_ON); libzmq never reconnects one it closed for an oversized message",
        ("kv_message_first",),
        picker_patches=("kv-no-reconnect",),
    ),
    Guard(
        PARSE_COST,
        "the precise index tokenizes and hashes a long prompt piece by piece, and the offloaded parse "
        "drops the parsed document once the key is made (index/precise.py, server/offload.py)",
        ("agent_bodies",),
        picker_patches=("whole-prompt-key",),
    ),
    Guard(
        PICKER_RETRY,
        "Envoy opens an ext_proc stream again on another picker replica when one refuses the "
        "connection (EnvoyOptions.picker_stream_retries, GrpcService.retry_policy) and ejects a "
        "replica whose connections fail (EnvoyOptions.picker_ejection)",
        ("picker_replica_restart",),
        envoy=(("picker_stream_retries", 0), ("picker_ejection", False)),
    ),
    Guard(
        STATE_FILE,
        "a picker writes its prefix index to --state-file (the operator renders it on an emptyDir) and "
        "reads it at start",
        ("picker_replica_restart", "picker_kill_and_restart"),
        picker_flags=("--state-file=",),
    ),
)

__all__ = ["FAULTS", "GUARDS", "agent_bodies", "agent_body", "kv_message_first", "picker_replica_restart"]
