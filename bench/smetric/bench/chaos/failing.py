"""Chaos faults of a failing engine whose ``/metrics`` stays healthy: one emulated engine answers every
generation request with 503, 429 (``Retry-After: 1``) or 500, or is dead (the emulator's ``dead``
mode: running requests aborted, every API call 503, ``/metrics`` still served). To every load signal
it looks idle, so without the guards it draws new sessions and its pinned sessions fail each turn.

Per fault: 12 sessions whose first turn the engine served, then 60 requests three at a time, in
send order three next turns of those sessions for every two new sessions (36 + 24). A request
reached the failing engine when the gateway retried it (``x-envoy-attempt-count`` > 1: the first
attempt failed) or the engine answered it. Then the engine recovers and new sessions are sent one
at a time until one is served by it again: the picker's probe after the ejection readmits it.

Two guards, one row each: the gateway retries an engine's 5xx / 429 on the picker's next fallback
(all 60 requests get 200), and the picker's outlier detection ejects the engine after 3 errors (at
most 2 of the 60 reach it after its first 3; it is readmitted after a successful probe).
"""

from __future__ import annotations

import asyncio
import time
from dataclasses import dataclass

from smetric.bench.chaos.frozen import _sessions_on
from smetric.bench.chaos.guards import Guard
from smetric.bench.chaos.row import Fault, Row
from smetric.bench.chaos.stack import ChaosStack, Reply, chat

OUTLIER_EJECTION = "picker ejects an endpoint that answers errors"
STATUS_RETRY = "gateway retries an engine's 5xx and 429 on the picker's fallbacks"

PINNED = 12  # sessions whose first turn the failing engine served
TURNS = 3  # next turns of each pinned session: 36 requests
NEW = 24  # new sessions: 60 requests in all
CONCURRENCY = 3
FIRST_ERRORS = 3  # --outlier-consecutive-errors' default
NEW_AFTER_FIRST_ERRORS = 2  # new sessions it may draw after its first 3 errors
EJECTION_S = 10.0  # --outlier-ejection-ms' default: one probe per ejection (a failed one doubles it)
# The picker's first ejection (--outlier-ejection-ms, 10 s) x 2 (a probe that failed during the
# run doubles it) + slack: how long the row waits for the recovered engine to serve again.
BACK_WITHIN_S = 35.0
BACK_WAVE = 6


@dataclass(frozen=True, slots=True)
class Failure:
    label: str  # row text
    spec: dict[str, object]  # the emulator's /admin/fault body
    victim: int  # which engine fails (each fault its own, so pinned sessions of one do not leak)


FAILURES = (
    Failure("503", {"mode": "error", "status": 503}, 0),
    Failure("429 (Retry-After: 1)", {"mode": "error", "status": 429, "retry_after_s": 1}, 1),
    Failure("500", {"mode": "error", "status": 500}, 2),
    Failure("dead (API 503, running requests aborted)", {"mode": "dead"}, 0),
)


def _reached(r: Reply, address: str) -> bool:
    return r.attempts > 1 or r.served == address


def _send_order(pinned: list[str], tag: int) -> list[tuple[str, dict[str, object]]]:
    """Three next turns of the pinned sessions for every two new sessions, in send order."""
    turns = [(f"pinned {s}", chat(s, t + 1)) for t in range(TURNS) for s in pinned]
    new = [("new", chat(f"fresh-{tag}-{n}", 0)) for n in range(NEW)]
    out: list[tuple[str, dict[str, object]]] = []
    while turns or new:
        out += [turns.pop(0) for _ in range(min(3, len(turns)))]
        out += [new.pop(0) for _ in range(min(2, len(new)))]
    return out


async def _run(st: ChaosStack, order: list[tuple[str, dict[str, object]]]) -> list[Reply]:
    gate = asyncio.Semaphore(CONCURRENCY)

    async def one(body: dict[str, object]) -> Reply:
        async with gate:
            return await st.post(body, timeout_s=30.0)

    return list(await asyncio.gather(*(one(b) for _, b in order)))


async def _back(st: ChaosStack, address: str, tag: int) -> float | None:
    """Seconds until a new session is served by ``address`` with 200 at the first attempt. The
    sessions go out in waves of :data:`BACK_WAVE` with a few thousand tokens each, so the ledger
    spreads them (one at a time, idle engines tie and the learned prefill speeds decide)."""
    t0 = time.monotonic()
    n = 0
    while time.monotonic() - t0 < BACK_WITHIN_S:
        wave = await asyncio.gather(
            *(st.post(chat(f"back-{tag}-{n}-{k}", 1, filler=400), timeout_s=30.0) for k in range(BACK_WAVE))
        )
        n += 1
        if any(r.served == address and r.status == 200 and not r.error and r.attempts == 1 for r in wave):
            return time.monotonic() - t0
        await asyncio.sleep(0.5)
    return None


async def _one_failure(st: ChaosStack, f: Failure) -> list[Row]:
    address = st.endpoints[f.victim]
    tag = time.monotonic_ns()
    pinned = await _sessions_on(st, address, tag, PINNED)
    order = _send_order(pinned, tag)
    await st.engine_fault(address, f.spec)
    t0 = time.monotonic()
    try:
        replies = await _run(st, order)
        run_s = time.monotonic() - t0
    finally:
        await st.engine_fault(address, {"mode": "ok"})
    await st.wait_fresh()
    back_s = await _back(st, address, tag)
    # not back: what the picker thinks of each engine's prefill speed (a stale low one keeps it out)
    speeds = {} if back_s is not None else await st.picker_metric_values("smetric_epp_endpoint_prefill_speed")
    ok = sum(1 for r in replies if r.status == 200 and not r.error)
    reached = [i for i, r in enumerate(replies) if _reached(r, address)]
    after = reached[FIRST_ERRORS:]
    new_after = sum(1 for i in after if order[i][0] == "new")
    new_drawn = sum(1 for i in reached if order[i][0] == "new")
    # after its third error: the requests in flight then (CONCURRENCY - 1), and one probe per
    # ejection the run outlasted
    allowed = CONCURRENCY - 1 + int(run_s // EJECTION_S)
    codes = sorted({r.status for r in replies})
    what = f"engine answering {f.label}, /metrics healthy"
    return [
        Row(
            f"{what}: {len(order)} requests ({NEW} new sessions, {TURNS} turns of {len(pinned)} "
            "sessions pinned to it), 3 at a time",
            "all 200 (a failed attempt retried on the picker's next fallback)",
            f"{ok}/{len(replies)} ok (statuses {codes}); {len(reached)} reached it",
            len(pinned) == PINNED and ok == len(replies),
            STATUS_RETRY,
        ),
        Row(
            f"{what}: what reaches it after its first {FIRST_ERRORS} errors, and its recovery",
            f"after them at most {NEW_AFTER_FIRST_ERRORS} new sessions, and in all only the "
            f"{CONCURRENCY - 1} requests in flight then plus one probe per {EJECTION_S:g} s ejection "
            "(its pinned sessions move); recovered, it serves again within "
            f"{BACK_WITHIN_S:g} s (a probe readmits it)",
            f"{len(reached)} reached it, {len(after)} after its first {FIRST_ERRORS} (allowed {allowed} "
            f"in {run_s:.1f} s; {new_after} new sessions; {new_drawn} of {NEW} new sessions in all); "
            + (
                f"served again {back_s:.1f} s after recovery"
                if back_s is not None
                else "not served again (learned prefill speeds: "
                + ", ".join(f"{st.engine_name(a)} {v:.2f}" for a, v in sorted(speeds.items()))
                + ")"
            ),
            len(pinned) == PINNED
            and len(reached) >= FIRST_ERRORS
            and new_after <= NEW_AFTER_FIRST_ERRORS
            and len(after) <= allowed
            and back_s is not None,
            OUTLIER_EJECTION,
        ),
    ]


async def failing_engines(st: ChaosStack, quick: bool) -> list[Row]:
    rows: list[Row] = []
    for f in FAILURES:
        rows += await _one_failure(st, f)
    return rows


FAULTS: tuple[Fault, ...] = (failing_engines,)

GUARDS: tuple[Guard, ...] = (
    Guard(
        OUTLIER_EJECTION,
        "the picker's passive outlier detection (server/outlier.py, --outlier-consecutive-errors 3): "
        "an endpoint with 3 errors or retried attempts in a row is stale to routing for "
        "--outlier-ejection-ms, then readmitted by a successful probe",
        ("failing_engines",),
        picker_flags=("--outlier-consecutive-errors=0",),
    ),
    Guard(
        STATUS_RETRY,
        "the route retries an engine's 5xx and 429 (retry_on 5xx,retriable-status-codes; "
        "EnvoyOptions.retry_on_status) on the picker's next fallback",
        ("failing_engines",),
        envoy=(("retry_on_status", False),),
    ),
)

__all__ = ["FAULTS", "GUARDS", "OUTLIER_EJECTION", "STATUS_RETRY", "failing_engines"]
