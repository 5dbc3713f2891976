"""Chaos fault of slow clients: hundreds of uploads that stop after their first bytes, held open
while normal requests go through, then shed by the picker's decision budget."""

from __future__ import annotations

import asyncio
import time

from smetric.bench.chaos.guards import ADMISSION, UPLOAD_COUNTING
from smetric.bench.chaos.row import Row
from smetric.bench.chaos.stack import MODEL, ChaosStack, chat

HELD_UPLOADS = 600
NORMAL_REQUESTS = 10


async def _stalled_upload(
    st: ChaosStack, timeout_s: float, opened: asyncio.Semaphore
) -> tuple[int, float, str]:
    """A request whose body stops after its first bytes (raw HTTP/1.1: the client never finishes
    the content-length it announced). Releases ``opened`` once its bytes are sent. Returns
    (status, seconds to the answer, retry-after); status 0: no answer in ``timeout_s``."""
    host, port = st.url.removeprefix("http://").rsplit(":", 1)
    prefix = b'{"model":"' + MODEL.encode() + b'","messages":[{"role":"user","content":"'
    head = (
        f"POST /v1/chat/completions HTTP/1.1\r\nhost: {host}\r\ncontent-type: application/json\r\n"
        f"content-length: {len(prefix) + 100_000}\r\n\r\n"
    ).encode()
    t0 = time.monotonic()
    status, retry_after = 0, ""
    try:
        reader, writer = await asyncio.open_connection(host, int(port))
    except OSError:
        opened.release()
        return -1, time.monotonic() - t0, ""
    try:
        writer.write(head + prefix)
        await writer.drain()
        opened.release()
        async with asyncio.timeout(timeout_s):
            line = await reader.readline()
            status = int(line.split()[1]) if len(line.split()) > 1 else 0
            while (h := await reader.readline()) not in (b"\r\n", b""):
                name, _, value = h.decode("latin-1").partition(":")
                if name.strip().lower() == "retry-after":
                    retry_after = value.strip()
    except TimeoutError:
        status = 0
    except (ConnectionError, ValueError):
        status = -1
    finally:
        writer.close()
    return status, time.monotonic() - t0, retry_after


async def slow_uploads(st: ChaosStack, quick: bool) -> list[Row]:
    """``HELD_UPLOADS`` uploads stall after 17 bytes of a declared 100 kB body. While they are held,
    ``NORMAL_REQUESTS`` normal requests must all get 200 (the picker counts a request against its
    admission limit only once its body is complete); then every stalled one must get 503 +
    retry-after from the decision budget, with the health check answering throughout."""
    s = st.settings
    budget_s = s.decision_budget_ms / 1000.0
    bound_s = budget_s + 2.0  # the budget, plus slack for the shared box
    before = await st.picker_metric("smetric_epp_shed_total", {"reason": "deadline"}) or 0.0
    health: list[float] = []

    async def probe() -> None:
        while True:
            health.append(await st.health_latency_s())
            await asyncio.sleep(0.2)

    task = asyncio.create_task(probe())
    opened = asyncio.Semaphore(0)
    t0 = time.monotonic()
    stalled = [asyncio.create_task(_stalled_upload(st, bound_s * 3, opened)) for _ in range(HELD_UPLOADS)]
    for _ in range(HELD_UPLOADS):
        await opened.acquire()
    open_s = time.monotonic() - t0
    streams = 0.0
    while streams < HELD_UPLOADS and time.monotonic() - t0 < budget_s * 0.6:  # the picker holds them
        streams = await st.picker_metric("smetric_epp_active_streams") or 0.0
        await asyncio.sleep(0.05)
    normal = await asyncio.gather(
        *(st.post(chat(f"upload-{i}", 0, max_tokens=4)) for i in range(NORMAL_REQUESTS))
    )
    normal_s = time.monotonic() - t0
    results = await asyncio.gather(*stalled)
    task.cancel()
    shed = (await st.picker_metric("smetric_epp_shed_total", {"reason": "deadline"}) or 0.0) - before
    ok_normal = sum(1 for r in normal if r.status == 200 and not r.error)
    codes = sorted({c for c, _, _ in results})
    worst_s = max(e for _, e, _ in results)
    worst_health = max(health) if health else 99.0
    return [
        Row(
            f"{NORMAL_REQUESTS} normal requests while {HELD_UPLOADS} partial uploads are held",
            "all 200 (uploads in progress do not count against the picker's admission limit "
            f"of {s.max_inflight_decisions})",
            f"{ok_normal}/{NORMAL_REQUESTS} ok ({sorted({r.status for r in normal})}) within "
            f"{normal_s:.1f} s; {HELD_UPLOADS} uploads open after {open_s:.1f} s, picker streams "
            f"{streams:.0f}",
            ok_normal == NORMAL_REQUESTS and streams >= HELD_UPLOADS,
            UPLOAD_COUNTING,
        ),
        Row(
            f"{HELD_UPLOADS} stalled uploads (decision budget {budget_s:g} s)",
            f"every one 503 + retry-after within {bound_s:.1f} s, health < 1 s",
            f"codes {codes}; slowest {worst_s:.2f} s; shed by deadline {shed:.0f}; worst health "
            f"{worst_health:.2f} s",
            all(c == 503 and ra == "1" for c, _, ra in results) and worst_s < bound_s and worst_health < 1.0,
            ADMISSION,
        ),
    ]
