"""Chaos fault: a load spike three times what the pool serves within its SLO, with the picker's
flow control on (docs/overload.md).

The three emulated engines run in real time for the row (the emulator's ``slow`` fault with
``slowdown = 1 / time_scale``), so the picker's TTFT SLO, its cost model and the client's clock
agree. Every request is a new session of :data:`PROMPT_TOKENS` tokens (no cached prefix: each
costs a whole prefill, :data:`PREFILL_S` on the default cost model, within a TTFT SLO of
:data:`SLO_S`). The pool's capacity is ``engines / PREFILL_S`` requests per second; the spike
offers three times that, evenly spaced, for :data:`SPIKE_S` (quick: :data:`QUICK_SPIKE_S`).

With flow control (the row's picker config: ``flowControl.enabled``, ``ttlS`` :data:`TTL_S`,
``shedOnDeadline``) a request no engine can start in time waits in the picker's bounded queue
and is answered 429 + Retry-After when its deadline passes: every request has its first byte or
its refusal within the TTL (plus :data:`SLACK_S`). Without it (the guard off: patch ``no-flow-control``, the picker builds no
gate whatever its config says) every request is dispatched at once, the engines' queues grow by twice their capacity each second, and TTFT
grows with the spike's length.

Also checked: the picker answers its health check within 0.25 s of its own CPU time throughout,
and its memory (parse workers included) grows by less than :data:`RSS_BOUND_MB`.
"""

from __future__ import annotations

import asyncio
import time

from smetric.bench.chaos.bodies import probed
from smetric.bench.chaos.guards import Guard
from smetric.bench.chaos.row import Fault, Row
from smetric.bench.chaos.stack import MODEL, ChaosStack, Reply
from smetric.core.presets import PRESETS
from smetric.core.slo import SloConfig

FLOW_CONTROL = "flow control holds what no engine can start within its SLO"

PROMPT_TOKENS = 4000  # about: the fallback tokenizer's count of the body below
_COST = PRESETS["qwen3-30b-h20"].cost_model
PREFILL_S = _COST.c_lin_s * PROMPT_TOKENS + _COST.c_att_s * PROMPT_TOKENS * PROMPT_TOKENS / 2  # 0.58 s
SLO_S = SloConfig().ttft_slo_s(PROMPT_TOKENS)  # 1.25 s
SPIKE = 3.0  # times the pool's capacity
SPIKE_S = 60.0
QUICK_SPIKE_S = 20.0
TTL_S = 5.0  # flowControl.ttlS of the row's config
SLACK_S = 2.0  # past the TTL: a dispatched request's own prefill and the gateway's hops
HEALTH_BOUND_S = 0.25
RSS_BOUND_MB = 150.0
CLIENT_TIMEOUT_S = 30.0


def _body(i: int) -> bytes:
    """A new session's first request: ~:data:`PROMPT_TOKENS` tokens of tool output (4-character
    words and single spaces: two fallback-tokenizer pieces each)."""
    import orjson

    words = " ".join(f"w{(i * 7919 + k) % 1000:03d}" for k in range(PROMPT_TOKENS // 2))
    messages = [
        {"role": "system", "content": f"[spike-{i}] You are a coding agent."},
        {"role": "user", "content": words},
    ]
    return orjson.dumps({"model": MODEL, "messages": messages, "stream": True, "max_tokens": 8})


def _config() -> str:
    return (
        "policy:\n  name: smetric\nflowControl:\n  enabled: true\n"
        f"  ttlS: {TTL_S:g}\n  shedOnDeadline: true\n  retryAfterS: 1\n  maxQueued: 256\n"
    )


def _answered_s(r: Reply) -> float:
    """When the client had its first byte, or its refusal (the whole answer), or gave up."""
    if r.status == 200 and r.first_byte_s is not None:
        return r.first_byte_s
    return r.elapsed_s


async def load_spike(st: ChaosStack, quick: bool) -> list[Row]:
    flow_on = FLOW_CONTROL not in {g.name for g in st.settings.guards_off}
    engines = list(st.endpoints)
    capacity = len(engines) / PREFILL_S
    rate = SPIKE * capacity
    duration_s = QUICK_SPIKE_S if quick else SPIKE_S
    n = int(rate * duration_s)
    config = st.work / "spike-picker.yaml"
    config.write_text(_config())
    argv = st.picker_argv
    st.picker_argv = [a if not a.startswith("--config=") else f"--config={config}" for a in argv]
    slowdown = 1.0 / st.settings.time_scale
    try:
        await st.sup.stop("picker")
        await st.start_picker()
        for address in engines:
            await st.engine_fault(address, {"mode": "slow", "slowdown": slowdown})

        async def one(i: int) -> Reply:
            await asyncio.sleep(i / rate)
            return await st.post(_body(i), timeout_s=CLIENT_TIMEOUT_S)

        t0 = time.monotonic()
        p = await probed(st, asyncio.gather(*(one(i) for i in range(n))))
        took_s = time.monotonic() - t0
    finally:
        for address in engines:
            await st.engine_fault(address, {"mode": "ok"})
        st.picker_argv = argv
        await st.sup.stop("picker")
        await st.start_picker()
    replies = p.replies
    served = [r for r in replies if r.status == 200 and not r.error]
    shed = sum(1 for r in replies if r.status == 429)
    other = sorted({r.status for r in replies if r.status not in (200, 429)})
    cut = sum(1 for r in replies if r.status == 200 and r.error)
    waits = sorted(_answered_s(r) for r in replies)
    worst = waits[-1] if waits else 0.0
    bound_s = TTL_S + SLACK_S
    late = sum(1 for w in waits if w > bound_s)
    in_slo = sum(1 for r in served if r.first_byte_s is not None and r.first_byte_s <= SLO_S)
    growth = p.peak_mb - p.rss0_mb
    return [
        Row(
            f"load spike: {SPIKE:g}x the pool's capacity ({rate:.1f} new {PROMPT_TOKENS}-token sessions/s "
            f"for {duration_s:g} s, engines in real time), flow control " + ("on" if flow_on else "off"),
            f"every request has its first byte or a 429 within the queue's TTL + {SLACK_S:g} s "
            f"({bound_s:g} s); picker health < {HEALTH_BOUND_S} s (its CPU); RSS growth < {RSS_BOUND_MB:g} MB",
            f"{len(replies)} sent in {took_s:.0f} s: {len(served)} served ({in_slo} within the {SLO_S:.2f} s "
            f"TTFT SLO), {shed} shed (429), {cut} cut, other statuses {other}; answer p50 {waits[len(waits) // 2]:.2f} s, "
            f"worst {worst:.2f} s, {late} past {bound_s:g} s; health {p.worst_health_cpu_s:.3f} s CPU "
            f"({p.worst_health_s:.2f} s wall); RSS {p.rss0_mb:.0f} -> {p.peak_mb:.0f} MB (+{growth:.0f})",
            late == 0
            and not other
            and cut == 0
            and p.worst_health_cpu_s < HEALTH_BOUND_S
            and growth < RSS_BOUND_MB
            and len(served) > 0,
            FLOW_CONTROL,
        )
    ]


FAULTS: tuple[Fault, ...] = (load_spike,)

GUARDS: tuple[Guard, ...] = (
    Guard(
        FLOW_CONTROL,
        "the picker's flow control (server/flow.py; flowControl in the picker config): a request no "
        "endpoint can start within its TTFT SLO waits in a bounded fair queue and is refused with 429 "
        "+ Retry-After past its deadline or TTL",
        ("load_spike",),
        picker_patches=("no-flow-control",),
    ),
)

__all__ = ["FAULTS", "FLOW_CONTROL", "GUARDS", "load_spike"]
