"""Chaos faults of the request's way in: client routing headers (also through a FailOpen gateway
whose picker is unreachable), reused client request ids, non-inference paths, and a long prefill
that keeps the picker's stream quiet past gRPC's default ping policy."""

from __future__ import annotations

import asyncio
import time

from smetric.bench.chaos.guards import LEDGER_KEY, PATHS, PICKER_PINGS, PROTOCOL_GUARD, SCRUB
from smetric.bench.chaos.row import Row
from smetric.bench.chaos.stack import MODEL, ChaosStack, Reply, chat
from smetric.bench.procs import free_port


async def hostile_headers_and_paths(st: ChaosStack, quick: bool) -> list[Row]:
    admin = f"127.0.0.1:{st.admin_port}"
    hostile = {
        "x-gateway-destination-endpoint": admin,
        "x-smetric-destination-primary": admin,
        "x-envoy-original-dst-host": admin,
        "x-prefiller-host-port": "10.255.0.1:1",
        "x-smetric-request-id": "reused",
        "x-request-id": "reused",
    }
    replies = await asyncio.gather(*(st.post(chat(f"hdr-{i}", 0), hostile) for i in range(4)))
    pool = {*st.endpoints}
    steer_ok = all(r.status == 200 and not r.error and r.served in pool for r in replies)
    # A FailOpen gateway that routes by header (ORIGINAL_DST, the Kubernetes shape) whose picker is
    # unreachable: no header mutation happens, only the gateway's scrub keeps the client's own
    # destination header away from the router. (Envoy 1.40 fails open in BUFFERED mode only.)
    open_url, open_admin = await st.start_gateway(
        "envoy-failopen", failure_mode_allow=True, picker_port=free_port(), request_body_mode="BUFFERED"
    )
    try:
        steer = {**hostile, "x-smetric-destination-primary": f"127.0.0.1:{open_admin}"}
        opened = [await st.post(chat(f"hdr-open-{i}", 0), steer, url=open_url) for i in range(2)]
    finally:
        await st.sup.stop("envoy-failopen")
    open_ok = all(r.status and r.served in pool | {"", "-"} for r in opened)
    reused = await _reused_request_ids(st)
    paths = {}
    for path in ("/healthcheck/fail", "/metrics", "/reset_prefix_cache", "/v1/chat/completions/../x"):
        paths[path] = (await st.post({"model": MODEL}, hostile, path=path)).status
    assert st.session is not None
    async with st.session.get(f"http://{admin}/ready") as r:
        admin_live = (await r.text()).strip() == "LIVE"
    return [
        Row(
            "client routing headers (admin address, prefiller, reused ids), also through a FailOpen "
            "gateway whose picker is unreachable",
            "served by a pool endpoint (FailOpen: refused, never sent to the client's address), "
            "Envoy admin untouched",
            f"{sum(r.status == 200 for r in replies)}/4 ok on {sorted({r.served for r in replies})}; "
            f"FailOpen: {[(r.status, r.served) for r in opened]}; admin LIVE={admin_live}",
            steer_ok and open_ok and admin_live,
            SCRUB,
        ),
        reused,
        Row(
            "non-inference paths",
            "404 at the gateway",
            ", ".join(f"{p} {s}" for p, s in paths.items()),
            all(s == 404 for s in paths.values()),
            PATHS,
        ),
    ]


async def _reused_request_ids(st: ChaosStack) -> Row:
    """Eight new agent sessions at once (~20k-token prompts, so their prefills overlap), all with
    one client x-request-id. The picker's dispatch ledger must hold all eight until their first
    tokens: its queued-prefill gauges then add up to about eight times one request's. Keyed on the
    client's id, each dispatch replaces the previous entry and the ledger holds one at a time."""
    rid = {"x-request-id": f"reused-{time.monotonic_ns()}"}
    tag = time.monotonic_ns()
    n = 8

    async def peak_queued(requests: int) -> tuple[float, list[Reply]]:
        tasks = [
            asyncio.create_task(st.post(chat(f"rid-{tag}-{requests}-{i}", 16, filler=200, max_tokens=2), rid))
            for i in range(requests)
        ]
        peak = 0.0
        while not all(t.done() for t in tasks):
            queued = await st.picker_metric_values("smetric_epp_endpoint_queued_prefill_seconds")
            peak = max(peak, sum(queued.values()))
            await asyncio.sleep(0.05)
        return peak, [t.result() for t in tasks]

    one, first = await peak_queued(1)
    many, replies = await peak_queued(n)
    replies += first
    counted = many / one if one > 0 else 0.0
    ok = all(r.status == 200 and not r.error for r in replies) and counted >= n - 2
    return Row(
        f"{n} concurrent new sessions with one client x-request-id",
        f"all 200; the dispatch ledger holds every one (peak queued prefill >= {n - 2} x one request's)",
        f"{sum(r.status == 200 for r in replies)}/{n + 1} ok; peak queued {many:.2f} s = {counted:.1f} x "
        f"one request's {one:.2f} s",
        ok,
        LEDGER_KEY,
    )


# gRPC's default server ping policy closed the picker's connection after ~4 s of a quiet request
# (Envoy PINGs it every second); the long prefill must stay quiet well past that.
QUIET_PAST_S = 4.0 * 1.5


async def long_prefill(st: ChaosStack, quick: bool) -> list[Row]:
    """A ~100k-token agent prompt: with the engines' 10x time scale its prefill is quiet for ~9 s
    (the real one ~90 s), past gRPC's default ping policy and under the scaled idle timeout."""
    idle = st.settings.stream_idle_timeout_s
    r = await st.post(chat(f"long-{time.monotonic_ns()}", 80, filler=200, max_tokens=8), timeout_s=idle * 2)
    ttft = r.first_byte_s or 0.0
    return [
        Row(
            "long prefill (~100k tokens, quiet before its first byte)",
            f"200 after a first byte later than {QUIET_PAST_S:g} s (the picker connection outlives "
            f"the gateway's PINGs; idle timeout {idle:g} s not tripped)",
            f"{r.status} {r.error or r.body[:100]!r}, first byte {ttft:.2f} s, {r.elapsed_s:.2f} s",
            r.status == 200 and not r.error and ttft > QUIET_PAST_S,
            PICKER_PINGS,
        )
    ]


async def _raw(st: ChaosStack, data: bytes) -> bytes:
    """One raw request on its own connection; the first bytes of the answer (b"" if none)."""
    host, port = st.url.removeprefix("http://").rsplit(":", 1)
    reader, writer = await asyncio.open_connection(host, int(port))
    try:
        writer.write(data)
        await writer.drain()
        return await asyncio.wait_for(reader.read(64), 10.0)
    except (ConnectionError, TimeoutError):
        return b""
    finally:
        writer.close()


async def protocol_errors(st: ChaosStack, quick: bool) -> list[Row]:
    """Requests the HTTP codec refuses: HTTP/1.0, 100 KiB of headers, 101 header fields."""
    body = b'{"model":"m","messages":[{"role":"user","content":"hi"}],"max_tokens":2}'

    def post(version: bytes, extra: bytes) -> bytes:
        return (
            b"POST /v1/chat/completions "
            + version
            + b"\r\nhost: gw\r\ncontent-type: application/json\r\n"
            + extra
            + b"content-length: %d\r\nconnection: close\r\n\r\n" % len(body)
            + body
        )

    answers = {
        "HTTP/1.0": (await _raw(st, post(b"HTTP/1.0", b"")), b"426"),
        "100 KiB header": (await _raw(st, post(b"HTTP/1.1", b"x-big: " + b"a" * 102_400 + b"\r\n")), b"431"),
        "101 header fields": (
            await _raw(st, post(b"HTTP/1.1", b"".join(b"x-h%d: v\r\n" % i for i in range(101)))),
            b"431",
        ),
    }
    seen = {k: (a.split(b"\r\n", 1)[0].decode("latin-1") or "no answer") for k, (a, _) in answers.items()}
    return [
        Row(
            "HTTP/1.0 request, 100 KiB of headers, 101 header fields",
            "426, 431, 431 from the gateway (not a closed connection)",
            "; ".join(f"{k}: {v}" for k, v in seen.items()),
            all(a.split(b" ")[1:2] == [code] for a, code in answers.values()),
            PROTOCOL_GUARD,
        )
    ]


def _name(st: ChaosStack, served: str) -> str:
    return f"engine{st.endpoints.index(served)}" if served in st.endpoints else (served or "-")
