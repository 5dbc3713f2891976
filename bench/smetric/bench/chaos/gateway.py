"""Chaos checks of the gateway's own guards (``epp/smetric/epp/envoy/hardening.py``), and the
:class:`~smetric.bench.chaos.guards.Guard` entries that switch them off.

* Retries on the picker's fallbacks (``EnvoyOptions.retries``): :func:`prefills_on` puts requests
  in prefill on the engine ``chaos.faults.endpoint_kill`` is about to SIGKILL. The engine sends no
  response header before its first token (as vLLM), so each is reset before its response and
  must be retried on the picker's next fallback -- 200 from another engine. New requests sent
  after the kill are no test of retries: the picker sees the refused scrape within one scrape
  interval and stops choosing the engine at once.
* ext_proc fail-close (``EnvoyOptions.failure_mode_allow=False``): :func:`while_picker_dead`
  sends, with the picker SIGKILLed, a request without a body (Envoy's fail-open applies to it
  even in FULL_DUPLEX_STREAMED, where a request with a body gets 500 either way) and a chat
  request through a BUFFERED gateway. Fail-open would route both to an engine the picker never
  chose (the pool's round-robin fallback); fail-close answers 5xx.
* Upload bounds (``request_headers_timeout_s``, ``max_connections``; :func:`upload_bounds`):
  connections that never finish their headers get 408 after the header timeout (without it the
  stream idle timeout ends them, twice as late here), and a gateway with a connection limit
  closes the connections past it at once.
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

import aiohttp

from smetric.bench.chaos.guards import FAIL_CLOSE, RETRIES, UPLOAD_BOUNDS, Guard
from smetric.bench.chaos.row import Row
from smetric.bench.chaos.stack import ChaosStack, Reply, chat

PREFILL_WAVE = 6  # new sessions with long prompts at a time, spread over the pool by the picker
PREFILL_WAVES = 3
PREFILL_FILLER = 8000  # tool output of their one turn: a prefill of ~2.5 s alone at the chaos scale
SLOW_HEADER_CONNECTIONS = 100
CONNECTION_LIMIT = 32  # max_connections of the connection-limit row's own gateway
HELD_CONNECTIONS = 48


@dataclass(frozen=True, slots=True)
class Prefills:
    """Requests in prefill on ``address`` (``on_engine``: how many the engine held beyond its
    long stream, from its own ``/metrics``, just before the fault)."""

    address: str
    tasks: tuple[asyncio.Task[Reply], ...]
    on_engine: int
    retries_before: float

    async def row(self, st: ChaosStack, new: list[Reply]) -> Row:
        """The retries row, once the engine is dead: these requests and ``new`` ones sent after."""
        replies = await asyncio.gather(*self.tasks)
        retries = (
            await envoy_counter(st, st.admin_port, "cluster.pool.upstream_rq_retry") - self.retries_before
        )
        elsewhere = sum(1 for r in replies if r.status == 200 and not r.error and r.served != self.address)
        new_ok = sum(1 for r in new if r.status == 200 and not r.error and r.served != self.address)
        return Row(
            "endpoint SIGKILL: the requests it was prefilling, and new requests",
            "all 200 from another engine (reset before their response, retried on the picker's "
            "fallbacks; new ones placed elsewhere)",
            f"{self.on_engine} in prefill on {st.engine_name(self.address)} at the kill: "
            f"{elsewhere}/{len(replies)} 200 elsewhere ({sorted({r.status for r in replies})}), "
            f"gateway retries {retries:+.0f}; new: {new_ok}/{len(new)} 200 elsewhere",
            self.on_engine >= 1 and elsewhere == len(replies) and new_ok == len(new),
            RETRIES,
        )


async def prefills_on(st: ChaosStack, victim: str) -> Prefills:
    """Send new sessions with long prompts (the picker spreads them over the pool), a wave of
    ``PREFILL_WAVE`` at a time, until ``victim`` (``engineN``) holds at least one of them (its own
    ``/metrics``; at most ``PREFILL_WAVES`` waves of 2 s)."""
    address = st.endpoints[int(victim.removeprefix("engine"))]
    tag = time.monotonic_ns()
    before = await engine_requests(address)
    retries = await envoy_counter(st, st.admin_port, "cluster.pool.upstream_rq_retry")
    tasks: list[asyncio.Task[Reply]] = []
    held = 0.0
    for wave in range(PREFILL_WAVES):
        tasks += [
            asyncio.create_task(
                st.post(
                    chat(f"prefill-{tag}-{wave}-{n}", 1, filler=PREFILL_FILLER, max_tokens=4), timeout_s=60.0
                )
            )
            for n in range(PREFILL_WAVE)
        ]
        deadline = time.monotonic() + 2.0
        while held < 1 and time.monotonic() < deadline:
            await asyncio.sleep(0.1)
            held = await engine_requests(address) - before
        if held >= 1:
            break
    return Prefills(address, tuple(tasks), int(held), retries)


async def engine_requests(address: str) -> float:
    """Running plus waiting requests on an emulated engine (its own ``/metrics``)."""
    from prometheus_client.parser import text_string_to_metric_families

    names = ("vllm:num_requests_running", "vllm:num_requests_waiting")
    try:
        async with (
            aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2)) as s,
            s.get(f"http://{address}/metrics") as r,
        ):
            text = await r.text()
    except (aiohttp.ClientError, TimeoutError):
        return 0.0
    return sum(s.value for f in text_string_to_metric_families(text) for s in f.samples if s.name in names)


async def envoy_counter(st: ChaosStack, admin_port: int, name: str) -> float:
    """An Envoy stat (summed over the lines ending in ``name``; 0 when absent)."""
    assert st.session is not None
    url = f"http://127.0.0.1:{admin_port}/stats?filter={name}$"
    try:
        async with st.session.get(url, timeout=aiohttp.ClientTimeout(total=2)) as r:
            text = await r.text()
    except (aiohttp.ClientError, TimeoutError):
        return 0.0
    return sum(
        float(v) for k, _, v in (line.partition(": ") for line in text.splitlines()) if v and "admin" not in k
    )


async def while_picker_dead(st: ChaosStack) -> tuple[bool, str]:
    """With the picker process dead: a body-less GET on the stack's gateway and a chat request
    through a BUFFERED gateway (started here, stopped before returning). ``True`` when both got
    a 5xx from the gateway, none an engine's answer."""
    pool = (*st.endpoints, st.hostile.address)
    buffered, _ = await st.start_gateway("buffered", pool_endpoints=pool, request_body_mode="BUFFERED")
    try:
        assert st.session is not None
        t0 = time.monotonic()
        try:
            async with st.session.get(st.url + "/v1/models", timeout=aiohttp.ClientTimeout(total=10)) as g:
                got = Reply(g.status, g.headers.get("x-smetric-served-by", ""), time.monotonic() - t0)
        except (aiohttp.ClientError, TimeoutError) as exc:
            got = Reply(0, "", time.monotonic() - t0, type(exc).__name__)
        post = await st.post(chat("down-buffered", 0), timeout_s=10.0, url=buffered)
    finally:
        await st.sup.stop("buffered")
    ok = all(500 <= r.status < 600 and not r.served for r in (got, post))
    seen = ", ".join(
        f"{what} {r.status or r.error}" + (f" from {_engine(st, r.served)}" if r.served else "")
        for what, r in (("GET /v1/models", got), ("BUFFERED gateway POST", post))
    )
    return ok, seen


def _engine(st: ChaosStack, served: str) -> str:
    return "the hostile engine" if served == st.hostile.address else st.engine_name(served)


async def _slow_headers(st: ChaosStack, timeout_s: float) -> tuple[int, float]:
    """A connection that sends part of its headers and stops: (status, seconds to it; 0: none)."""
    host, port = st.url.removeprefix("http://").rsplit(":", 1)
    t0 = time.monotonic()
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(b"POST /v1/chat/completions HTTP/1.1\r\nhost: gw\r\ncontent-type: application/json\r\n")
        await writer.drain()
        async with asyncio.timeout(timeout_s):
            line = await reader.readline()
        parts = line.split()
        return (int(parts[1]) if len(parts) > 1 and parts[1].isdigit() else 0), time.monotonic() - t0
    except (TimeoutError, ConnectionError):
        return 0, time.monotonic() - t0
    finally:
        writer.close()


async def _closed_by_peer(reader: asyncio.StreamReader) -> bool:
    try:
        return await asyncio.wait_for(reader.read(1), 1.0) == b""
    except TimeoutError:
        return False
    except ConnectionError:
        return True


async def _held_connections(st: ChaosStack) -> tuple[int, float, Reply]:
    """``HELD_CONNECTIONS`` idle connections to a gateway limited to ``CONNECTION_LIMIT``: how
    many it closed, its overflow counter, and a request once they are released."""
    pool = (*st.endpoints, st.hostile.address)
    url, admin = await st.start_gateway("limited", pool_endpoints=pool, max_connections=CONNECTION_LIMIT)
    host, port = url.removeprefix("http://").rsplit(":", 1)
    conns = [await asyncio.open_connection(host, int(port)) for _ in range(HELD_CONNECTIONS)]
    try:
        closed = sum(await asyncio.gather(*(_closed_by_peer(r) for r, _ in conns)))
        overflow = await envoy_counter(st, admin, "downstream_cx_overflow")
    finally:
        for _, w in conns:
            w.close()
    await asyncio.sleep(0.2)
    after = await st.post(chat("limited", 0), url=url)
    await st.sup.stop("limited")
    return closed, overflow, after


async def upload_bounds(st: ChaosStack, quick: bool) -> list[Row]:
    """Slow clients at the gateway: connections that never finish their headers, and more
    connections than a gateway's limit (both at once)."""
    from smetric.epp.envoy import EnvoyOptions

    header_s = EnvoyOptions(listen_port=0, admin_port=0, picker_port=0).request_headers_timeout_s
    bound_s = header_s + 3.0
    slow = asyncio.gather(*(_slow_headers(st, bound_s + 2.0) for _ in range(SLOW_HEADER_CONNECTIONS)))
    closed, overflow, after = await _held_connections(st)
    normal = await asyncio.gather(*(st.post(chat(f"bounds-{i}", 0)) for i in range(5)))
    answers = await slow
    codes = sorted({c for c, _ in answers})
    worst = max(e for _, e in answers)
    past = HELD_CONNECTIONS - CONNECTION_LIMIT
    return [
        Row(
            f"{SLOW_HEADER_CONNECTIONS} connections that never finish their headers",
            f"every one 408 within {bound_s:g} s (header timeout {header_s:g} s); requests meanwhile 200",
            f"codes {codes} (0: no answer), slowest {worst:.1f} s; "
            f"{sum(r.status == 200 for r in normal)}/{len(normal)} normal requests 200",
            codes == [408] and worst < bound_s and all(r.status == 200 for r in normal),
            UPLOAD_BOUNDS,
        ),
        Row(
            f"{HELD_CONNECTIONS} idle connections to a gateway limited to {CONNECTION_LIMIT}",
            f"the {past} past the limit closed at once (downstream_cx_overflow {past}); 200 after",
            f"{closed} closed, overflow {overflow:.0f}; then {after.status or after.error}",
            closed == past and overflow == past and after.status == 200,
            UPLOAD_BOUNDS,
        ),
    ]


GUARDS: tuple[Guard, ...] = (
    Guard(
        RETRIES,
        "the gateway's route retries a connect failure, refused stream or reset before the "
        "response on the picker's next fallback (EnvoyOptions.retries; override_host policy)",
        ("endpoint_kill",),
        envoy=(("retries", 0),),
    ),
    Guard(
        FAIL_CLOSE,
        "ext_proc failure_mode_allow: false -- with the picker dead a request gets 5xx instead of "
        "the pool's round-robin fallback (EnvoyOptions.failure_mode_allow)",
        ("picker_kill_and_restart",),
        envoy=(("failure_mode_allow", True),),
    ),
    Guard(
        UPLOAD_BOUNDS,
        "the gateway bounds slow clients: request_headers_timeout, request_timeout, a downstream "
        "connection limit per listener, max_concurrent_streams (EnvoyOptions; hardening.upload_bounds)",
        ("upload_bounds",),
        envoy=(
            ("request_headers_timeout_s", 0.0),
            ("request_timeout_s", 0.0),
            ("max_connections", 0),
            ("max_concurrent_streams", 0),
        ),
    ),
)


__all__ = ["GUARDS", "Prefills", "prefills_on", "upload_bounds", "while_picker_dead"]
