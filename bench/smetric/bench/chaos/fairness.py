"""Chaos fault of clients hogging the picker's body budget (:func:`body_hogs`).

Four clients upload bodies one byte under the 16 MiB limit, hold them one byte short of complete,
and re-send the moment they are answered (the budget's 503, or the decision budget's 503 after
``--decision-budget-ms``). Four such bodies are 64 MiB - 4 bytes: with one cap on all bodies they
hold the whole 64 MiB budget, and nearly every normal request is refused. With the fair budget
(:data:`~smetric.bench.chaos.guards.BODY_FAIRNESS`) large bodies share at most 3/4 of it, so the
normal requests meanwhile (1 kB to 400 kB, log-uniform) must succeed: at least 99 %.
"""

from __future__ import annotations

import asyncio
import random
import time
from collections.abc import AsyncIterator

import aiohttp

from smetric.bench.chaos.guards import BODY_FAIRNESS
from smetric.bench.chaos.row import Row
from smetric.bench.chaos.stack import MODEL, ChaosStack
from smetric.core.stopping import cancel_and_wait

MAX_BODY_BYTES = 16 << 20  # the picker's default --max-body-bytes
ATTACKERS = 4
NORMAL_REQUESTS = 200
NORMAL_CONCURRENCY = 8
NORMAL_MIN_BYTES, NORMAL_MAX_BYTES = 1_000, 400_000
REQUIRED_OK = 0.99
# One shared document the normal requests cut their prompts from: the engines' prefix caches make
# the repeated prefix cheap, so the row measures the picker's admission, not prefill time. One word
# run (no spaces): the emulator's tokenizer cuts it into 4-character pieces, so 400 kB are 100k
# tokens, within the stack's 131,072-token context.
_DOC = "".join(f"section{i:06d}" for i in range(40_000)).encode()


def hog_body() -> bytes:
    head = (
        b'{"model":"'
        + MODEL.encode()
        + b'","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"'
    )
    tail = b'"}]}'
    return head + b"y" * (MAX_BODY_BYTES - 1 - len(head) - len(tail)) + tail


def normal_body(i: int, size: int) -> bytes:
    head = (
        b'{"model":"'
        + MODEL.encode()
        + b'","stream":true,"max_tokens":4,"messages":[{"role":"user","content":"'
    )
    tail = f' request {i}"}}]}}'.encode()
    return head + _DOC[: max(0, size - len(head) - len(tail))] + tail


async def _hog(st: ChaosStack, body: bytes, stop: asyncio.Event, outcomes: list[int]) -> None:
    """Upload ``body`` up to its last byte, hold it until answered, then at once again."""
    session = st.session
    assert session is not None

    async def upload() -> AsyncIterator[bytes]:
        for i in range(0, len(body) - 1, 1 << 20):
            yield body[i : min(i + (1 << 20), len(body) - 1)]
        await stop.wait()  # never completed: held until the picker answers

    while not stop.is_set():
        try:
            async with session.post(
                st.url + "/v1/chat/completions", data=upload(), headers={"content-type": "application/json"}
            ) as r:
                outcomes.append(r.status)
                await r.read()
        except (aiohttp.ClientError, ConnectionError):
            outcomes.append(0)
            await asyncio.sleep(0.05)


async def body_hogs(st: ChaosStack, quick: bool) -> list[Row]:
    rng = random.Random(33)
    n = NORMAL_REQUESTS // 2 if quick else NORMAL_REQUESTS
    sizes = [int(NORMAL_MIN_BYTES * (NORMAL_MAX_BYTES / NORMAL_MIN_BYTES) ** rng.random()) for _ in range(n)]
    stop = asyncio.Event()
    outcomes: list[int] = []
    hog = hog_body()
    hogs = [asyncio.create_task(_hog(st, hog, stop, outcomes)) for _ in range(ATTACKERS)]
    await asyncio.sleep(2.0)  # the hogs hold their bodies first
    gate = asyncio.Semaphore(NORMAL_CONCURRENCY)

    async def normal(i: int, size: int) -> tuple[int, str]:
        async with gate:
            r = await st.post(normal_body(i, size), timeout_s=60.0)
            return r.status, r.error

    t0 = time.monotonic()
    replies = await asyncio.gather(*(normal(i, size) for i, size in enumerate(sizes)))
    elapsed = time.monotonic() - t0
    stop.set()
    await cancel_and_wait(*hogs)
    ok = sum(1 for status, error in replies if status == 200 and not error)
    codes: dict[int, int] = {}
    for status, _ in replies:
        codes[status] = codes.get(status, 0) + 1
    hog_codes = sorted(set(outcomes))
    return [
        Row(
            f"{ATTACKERS} clients holding 16 MiB - 1 uploads, re-sent when answered; {n} normal "
            f"requests ({NORMAL_MIN_BYTES // 1000} kB-{NORMAL_MAX_BYTES // 1000} kB) meanwhile",
            f">= {REQUIRED_OK:.0%} of the normal requests 200 (large bodies share at most 3/4 of the "
            "64 MiB body budget, one per connection)",
            f"{ok}/{n} ok ({ok / n:.1%}), codes {dict(sorted(codes.items()))} in {elapsed:.1f} s; "
            f"the hogs were answered {len(outcomes)} times, codes {hog_codes}",
            ok >= REQUIRED_OK * n,
            BODY_FAIRNESS,
        )
    ]


__all__ = ["body_hogs"]
