"""The replay plan and the closed-loop scheduler: ordering, think times, sub-agent offsets, window."""

from __future__ import annotations

import asyncio
import itertools

import numpy as np
import pytest

from smetric.bench.plan import build_plan
from smetric.bench.replay import ClosedLoopReplay, Outcome, ReplayResult, SendSpec
from smetric.trace.model import Trace, TraceRequest

TS = 0.02  # wall seconds per model second: the whole test replays in well under a second


def _req(i: int, sid: str, turn: int, t: float, think: float, inp: int, out: int, parent: str | None = None,
         trigger: str = "agent") -> TraceRequest:  # fmt: skip
    return TraceRequest(
        index=i,
        session_id=sid,
        family_id=parent or sid,
        parent_session_id=parent,
        turn=turn,
        offset_s=t,
        think_time_s=think,
        prompt_tokens=inp,
        output_tokens=out,
        hash_ranges=np.empty((0, 2), dtype=np.int64),
        trigger=trigger,
        system_blocks=2 if turn == 0 else 0,
        model="m",
    )


def _trace() -> Trace:
    reqs = [
        _req(0, "A", 0, 0.0, 0.0, 1000, 100, trigger="first"),
        _req(1, "A", 1, 5.0, 2.0, 1300, 50),
        _req(2, "A::sub", 0, 3.0, 0.0, 400, 20, parent="A", trigger="subagent_first"),
        _req(3, "A", 2, 9.0, 20.0, 1700, 80),
        _req(4, "B", 0, 0.0, 0.0, 800, 40, trigger="first"),
        _req(5, "B", 1, 1.0, 1.0, 900, 40),
    ]
    return Trace(name="t", block_tokens=64, requests=reqs)


def count(text: str) -> int:
    return len(text.split())  # any additive counter will do for the scheduler


def test_plan_scales_tokens_and_groups_families() -> None:
    plan = build_plan(_trace(), ["B", "A"], {"A": 0.0, "B": 10.0}, token_scale=0.5)
    assert [f.family_id for f in plan.families] == ["A", "B"]  # by start time
    fam_a = plan.families[0]
    assert [s.session_id for s in fam_a.sessions] == ["A", "A::sub"]
    assert [r.prompt_tokens for r in fam_a.sessions[0].requests] == [500, 650, 850]
    assert fam_a.sessions[0].requests[0].system_tokens == 64  # 2 blocks x 64 tokens x 0.5
    assert fam_a.sessions[1].start_offset_s == 3.0
    assert plan.n_requests == 6 and plan.n_sessions == 3
    assert build_plan(_trace(), ["A"], {"A": 0.0}, 1.0, max_turns=1).n_requests == 2


def test_plan_rejects_bad_input() -> None:
    with pytest.raises(ValueError, match="not in trace"):
        build_plan(_trace(), ["Z"], {"Z": 0.0}, 1.0)
    with pytest.raises(ValueError, match="no start time"):
        build_plan(_trace(), ["A"], {}, 1.0)
    with pytest.raises(ValueError, match="token scale"):
        build_plan(_trace(), ["A"], {"A": 0.0}, 0.0)


class FakeServer:
    """Answers after a fixed model-time service delay and logs (wall time, session, turn)."""

    def __init__(self, service_model_s: float) -> None:
        self.service_s = service_model_s * TS
        self.log: list[tuple[float, str, int]] = []
        self.specs: list[SendSpec] = []
        self.t0 = 0.0

    async def send(self, spec: SendSpec) -> Outcome:
        loop = asyncio.get_running_loop()
        self.log.append(((loop.time() - self.t0) / TS, spec.session_id, spec.turn))
        self.specs.append(spec)
        await asyncio.sleep(self.service_s)
        return Outcome(ok=True, status=200, ttft_s=self.service_s / 2, e2e_s=self.service_s,
                       output_tokens=spec.max_tokens, text=" answer " * spec.max_tokens)  # fmt: skip


async def _run(service_model_s: float, duration_s: float = 0.0) -> tuple[FakeServer, ReplayResult]:
    plan = build_plan(_trace(), ["A", "B"], {"A": 0.0, "B": 10.0}, token_scale=1.0)
    server = FakeServer(service_model_s)
    replay = ClosedLoopReplay(plan, server.send, count, time_scale=TS, duration_s=duration_s)
    server.t0 = asyncio.get_running_loop().time()
    result = await replay.run()
    return server, result


@pytest.mark.looptime
async def test_closed_loop_order_and_think_times() -> None:
    # looptime: the event loop's clock is virtual, so the schedule is exact whatever the machine's load.
    server, result = await _run(service_model_s=4.0)
    origin = server.log[0][0]
    sent = {(sid, turn): t - origin for t, sid, turn in server.log}
    tol = 1e-6
    # A turn 0 at 0; done at 4; turn 1 at max(5, 4 + 2) = 6; done 10; turn 2 at max(9, 10 + 20) = 30
    assert sent[("A", 0)] == pytest.approx(0.0, abs=tol)
    assert sent[("A", 1)] == pytest.approx(6.0, abs=tol)
    assert sent[("A", 2)] == pytest.approx(30.0, abs=tol)
    assert sent[("A::sub", 0)] == pytest.approx(3.0, abs=tol)  # sub-agent at its family-clock offset
    # B starts at 10; turn 1 at max(10 + 1, 14 + 1) = 15
    assert sent[("B", 0)] == pytest.approx(10.0, abs=tol)
    assert sent[("B", 1)] == pytest.approx(15.0, abs=tol)
    # per session, never before the previous response ended
    for sid in ("A", "B"):
        times = [t for t, s, _ in server.log if s == sid]
        assert all(b - a >= 4.0 - 0.05 for a, b in itertools.pairwise(times))
    assert len(result.records) == 6 and result.not_sent == 0


async def test_follow_ups_carry_the_answer_and_session_header_data() -> None:
    server, _ = await _run(service_model_s=1.0)
    a_specs = [s for s in server.specs if s.session_id == "A"]
    first, second = a_specs[0], a_specs[1]
    assert second.messages[: len(first.messages)] == first.messages
    assert second.messages[len(first.messages)] == {"role": "assistant", "content": " answer " * 100}
    assert second.request_id == "A#1" and second.max_tokens == 50


async def test_window_stops_new_requests() -> None:
    server, result = await _run(service_model_s=4.0, duration_s=12.0)
    # sent: A0 (0), A::sub (3), A1 (6), B0 (10); not sent: A2 (30), B1 (15)
    assert sorted((s, t) for _, s, t in server.log) == [("A", 0), ("A", 1), ("A::sub", 0), ("B", 0)]
    assert result.not_sent == 2


async def test_stuck_request_is_recorded_as_timed_out_after_the_drain() -> None:
    plan = build_plan(_trace(), ["A", "B"], {"A": 0.0, "B": 10.0}, token_scale=1.0)
    server = FakeServer(1.0)

    async def send(spec: SendSpec) -> Outcome:
        if spec.session_id == "B":
            await asyncio.sleep(3600)  # never answers
        return await server.send(spec)

    replay = ClosedLoopReplay(plan, send, count, time_scale=TS, duration_s=12.0, drain_s=0.2)
    result = await replay.run()
    stuck = [r for r in result.records if r.session_id == "B"]
    assert len(stuck) == 1 and not stuck[0].outcome.ok
    assert "timed out" in stuck[0].outcome.error
    assert sum(1 for r in result.records if r.outcome.ok) == 3  # A0, A::sub, A1


def test_plan_caps_requests_to_the_kv_capacity() -> None:
    plan = build_plan(_trace(), ["A"], {"A": 0.0}, token_scale=1.0, max_request_tokens=1320)
    a = plan.families[0].sessions[0]
    assert [(r.prompt_tokens, r.output_tokens) for r in a.requests] == [
        (1000, 100),
        (1300, 20),
    ]  # 1700 left out
