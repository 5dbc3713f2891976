"""Chaos fault of hostile request bodies through the gateway (:func:`hostile_bodies`).

* The per-body limits (:data:`~smetric.bench.chaos.guards.BODY_LIMITS`): content nested 600 levels,
  a body that is not JSON and one a byte over 16 MiB are answered by the picker itself (400, 400,
  413: its error body, ``"type": "smetric_epp"``), so no engine spends anything on them.
* Parsing in worker processes (:data:`~smetric.bench.chaos.guards.PARSE_OFFLOAD`, switched off by
  ``--parse-processes=0``, which parses on two threads of the picker process): while three
  15.5 MiB agent transcripts (~250k messages each) are parsed and keyed, the picker's health server
  answers within one ``orjson.loads`` of such a body and its scrapes keep running, both counted in
  the picker's CPU seconds (see :data:`GAP_BOUND_S`). On threads the parse holds the GIL and the
  answers stall; a 15 MiB one-string body parses in milliseconds and would show nothing.
* The body budget (:data:`~smetric.bench.chaos.guards.BODY_BUDGET`): eight 15 MiB uploads held one
  byte short of complete are 120 MiB, more than the 64 MiB budget: the picker buffers at most four
  and refuses the others with its budget's 503 while they are held (complete bodies that parse in
  milliseconds may never be buffered together, so they would not show the budget), and its memory
  grows by less than eight budgets.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import AsyncIterator, Awaitable
from dataclasses import dataclass

import aiohttp
import orjson

from smetric.bench.chaos.cpu import cpu_s_of, process_cpu_s
from smetric.bench.chaos.guards import BODY_BUDGET, BODY_LIMITS, PARSE_OFFLOAD
from smetric.bench.chaos.row import Row
from smetric.bench.chaos.stack import MODEL, ChaosStack, Reply

MAX_BODY_BYTES = 16 << 20  # the picker's default --max-body-bytes
BUDGET_MB = 64.0  # the picker's default --body-budget-bytes
BUDGET_REFUSAL = b"its budget is"  # in the picker's 503 when its body budget is spent
HOLD_S = 1.5  # how long the held uploads stay held once all are sent up to their last byte
BODY_BYTES = int(15.5 * 1024 * 1024)  # an agent transcript just under the 16 MiB body limit
# While bodies are parsed, the picker's health answers must keep coming. A late answer on a loaded
# box can be the picker's own work or time it waited for a CPU; only the first is the guard's, so
# each answer counts as min(latency, CPU seconds all the picker's threads ran meanwhile)
# (:mod:`smetric.bench.chaos.cpu`): the box's load then does not move the verdict. With the parse
# on threads the event loop's thread sleeps on the GIL while an orjson, chat-rendering or tokenizer
# call holds it, and that call's CPU seconds count; with the worker processes the picker runs only
# its own loop meanwhile. The bound is one ``orjson.loads`` of the same body in CPU seconds,
# measured in this process in the same run (the box's speed): the parse on a thread holds the GIL
# at least that long. Measured on the 2-core box at load ~12: one loads 0.155 s; the worst answer
# 0.07-0.08 s with the worker processes (0.34-0.87 s of wall time), 0.42 s on threads (1.21 s).
GAP_BOUND_S = 1.0  # scrapes keep running: half the 2 s staleness threshold (in CPU seconds too)


def agent_messages(target_bytes: int) -> list[dict[str, str]]:
    """Short alternating user/assistant turns (tool steps) whose JSON fills about ``target_bytes``
    (300 bytes left for the body around them): the shape that costs the most after parsing."""
    messages: list[dict[str, str]] = []
    size, i = 0, 0
    while size < target_bytes - 300:
        m = {"role": "user" if i % 2 == 0 else "assistant", "content": f"step {i}: ls -la src/ ok {i * 7}"}
        messages.append(m)
        size += len(orjson.dumps(m)) + 1
        i += 1
    return messages


def agent_body(target_bytes: int = BODY_BYTES) -> bytes:
    """A streaming chat body of :func:`agent_messages` filling ``target_bytes``."""
    return orjson.dumps(
        {"model": MODEL, "stream": True, "max_tokens": 4, "messages": agent_messages(target_bytes)}
    )


def _nested(depth: int) -> bytes:
    content = b'{"type":"tool_result","content":' * depth + b'"x"' + b"}" * depth
    return b'{"model":"m","messages":[{"role":"user","content":' + content + b"}]}"


def from_picker(r: Reply, status: int) -> bool:
    """``r`` is the picker's own answer with ``status`` (its error body), not an engine's."""
    return r.status == status and b'"smetric_epp"' in r.body


def _said(r: Reply) -> str:
    who = "the picker" if b'"smetric_epp"' in r.body else (r.served or "the gateway")
    return f"{r.status or r.error} from {who}"


@dataclass(frozen=True)
class Probed:
    """Requests sent while the picker was probed: their replies, the worst health answer, the
    longest gap between two scrapes of the hostile engine, the picker's RSS before and at peak, and
    the worst answer and gap counted in the picker's CPU seconds (the module's bound)."""

    replies: list[Reply]
    worst_health_s: float
    worst_scrape_gap_s: float
    rss0_mb: float
    peak_mb: float
    worst_health_cpu_s: float  # max over answers of min(latency, picker CPU seconds meanwhile)
    worst_scrape_gap_cpu_s: float  # the same for the gaps between scrapes

    @property
    def growth_mb(self) -> float:
        return self.peak_mb - self.rss0_mb


async def probed(st: ChaosStack, requests: Awaitable[list[Reply]]) -> Probed:
    """``requests`` while the picker's health (every 0.1 s), CPU seconds and RSS are sampled."""
    rss0 = st.rss_mb()
    peak, worst, worst_cpu = rss0, 0.0, 0.0
    picker = st.pid("picker")

    def cpu() -> float:
        return process_cpu_s(picker)

    async def probe() -> None:
        nonlocal peak, worst, worst_cpu
        while True:
            c0 = cpu()
            latency = await st.health_latency_s()
            worst = max(worst, latency)
            worst_cpu = max(worst_cpu, min(latency, cpu() - c0))
            peak = max(peak, st.rss_mb())
            await asyncio.sleep(0.1)

    task = asyncio.create_task(probe())
    hostile = st.hostile
    hostile.worst_scrape_gap_s = hostile.worst_scrape_gap_cpu_s = 0.0
    hostile.cpu_clock, hostile.last_cpu = cpu, cpu()
    try:
        replies = await requests
    finally:
        task.cancel()
        hostile.cpu_clock = None
    return Probed(
        list(replies),
        worst,
        hostile.worst_scrape_gap_s,
        rss0,
        peak,
        worst_cpu,
        hostile.worst_scrape_gap_cpu_s,
    )


async def _concurrent(st: ChaosStack, body: bytes, n: int) -> list[Reply]:
    return list(await asyncio.gather(*(st.post(body, timeout_s=90) for _ in range(n))))


async def _held(st: ChaosStack, body: bytes, n: int) -> list[Reply]:
    """``n`` uploads of ``body`` at once, each held one byte short of complete until all are sent
    that far and :data:`HOLD_S` more (the picker then buffers them all, or refuses some), then
    completed. A refused upload has its answer while it is held."""
    session = st.session
    assert session is not None
    release, parked = asyncio.Event(), asyncio.Event()
    sent = [0]

    async def upload() -> AsyncIterator[bytes]:
        yield body[:-1]
        sent[0] += 1
        if sent[0] == n:
            parked.set()
        await release.wait()
        yield body[-1:]

    async def one() -> Reply:
        t0 = time.monotonic()
        status = 0
        try:
            async with asyncio.timeout(90):
                async with session.post(
                    st.url + "/v1/chat/completions",
                    data=upload(),
                    headers={"content-type": "application/json"},
                ) as r:
                    status = r.status
                    data = await r.read()
                    return Reply(
                        status, r.headers.get("x-smetric-served-by", ""), time.monotonic() - t0, body=data
                    )
        except TimeoutError:
            return Reply(status, "", time.monotonic() - t0, "stuck (client timeout)")
        except (aiohttp.ClientError, ConnectionError) as exc:
            return Reply(status, "", time.monotonic() - t0, type(exc).__name__)

    tasks = [asyncio.create_task(one()) for _ in range(n)]
    with contextlib.suppress(TimeoutError):
        await asyncio.wait_for(parked.wait(), 60.0)
    await asyncio.sleep(HOLD_S)
    release.set()
    return list(await asyncio.gather(*tasks))


async def hostile_bodies(st: ChaosStack, quick: bool) -> list[Row]:
    nested = await st.post(_nested(600))
    garbage = await st.post(b"{not json at all")
    head, tail = b'{"model":"m","messages":[{"role":"user","content":"', b'"}]}'
    too_big = await st.post(head + b"x" * (MAX_BODY_BYTES + 1 - len(head) - len(tail)) + tail)
    big = (
        b'{"model":"m","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"'
        + b"y" * (15 << 20)
        + b'"}]}'
    )
    agent = agent_body()
    loads_s = min(cpu_s_of(orjson.loads, agent) for _ in range(3))  # the bound: the box's speed
    p3 = await probed(st, _concurrent(st, agent, 3))
    p8 = await probed(st, _held(st, big, 8))
    three, own3, gap3 = p3.replies, p3.worst_health_cpu_s, p3.worst_scrape_gap_cpu_s
    eight, worst8, growth = p8.replies, p8.worst_health_s, p8.growth_mb
    codes = sorted(r.status for r in eight)
    refused = sum(1 for r in eight if from_picker(r, 503) and BUDGET_REFUSAL in r.body)
    must_refuse = len(eight) - int(BUDGET_MB * (1 << 20)) // len(big)  # past the budget while held
    return [
        Row(
            "600-level nested content",
            "400 from the picker (no traceback, no 500, no engine)",
            _said(nested),
            from_picker(nested, 400),
            BODY_LIMITS,
        ),
        Row(
            "body that is not JSON",
            "400 from the picker",
            _said(garbage),
            from_picker(garbage, 400),
            BODY_LIMITS,
        ),
        Row(
            "body one byte over 16 MiB (the limit)",
            "413 from the picker",
            _said(too_big),
            from_picker(too_big, 413),
            BODY_LIMITS,
        ),
        Row(
            "3 concurrent 15.5 MiB agent bodies (~250k messages each)",
            "every one answered; health answers < one orjson.loads of the body and scrape gaps "
            f"< {GAP_BOUND_S:g} s (half the 2 s staleness threshold), both in the picker's CPU seconds "
            "(min(wall, its CPU meanwhile): the box's load does not count)",
            f"codes {sorted(r.status for r in three)}; worst health {own3:.3f} s "
            f"(one loads {loads_s:.3f} s; wall {p3.worst_health_s:.2f} s); longest scrape gap "
            f"{gap3:.2f} s (wall {p3.worst_scrape_gap_s:.2f} s)",
            all(r.status != 0 for r in three) and own3 < loads_s and gap3 < GAP_BOUND_S,
            PARSE_OFFLOAD,
        ),
        Row(
            "8 concurrent 15 MiB uploads, held one byte short of complete",
            f"every one answered; the picker buffers at most its {BUDGET_MB:.0f} MiB body budget: at "
            f"least {must_refuse} refused (503) while held; RSS growth < 8 x budget",
            f"codes {codes} (400: the engine's context limit); {refused} refused by the budget; "
            f"picker RSS +{growth:.0f} MB; worst health {worst8:.2f} s",
            all(c != 0 for c in codes) and refused >= must_refuse and growth < 8 * BUDGET_MB,
            BODY_BUDGET,
        ),
    ]


__all__ = ["from_picker", "hostile_bodies"]
