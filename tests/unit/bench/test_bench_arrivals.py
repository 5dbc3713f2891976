"""Who starts families in ``smetric bench``: steady agents (the default), stationary Poisson starts,
and the closed-loop replay of both, against a fake server on a virtual clock."""

from __future__ import annotations

import asyncio
import dataclasses
import itertools

import numpy as np
import pytest

from smetric.bench.plan import (
    AgentPlan,
    PlannedFamily,
    ReplayPlan,
    agent_plan,
    family_templates,
    stationary_plan,
)
from smetric.bench.replay import ClosedLoopReplay, Outcome, ReplayResult, SendSpec
from smetric.sim.metrics import arrival_drift
from smetric.trace import AgentStart, SteadyAgents, agents_for_rate
from smetric.trace.model import Trace, TraceRequest

SERVICE_S = 0.05  # model seconds per answer (TS = 1: the virtual wall clock is the model clock)


def _trace(durations: list[float], turns: int = 20, front_loaded: bool = True) -> Trace:
    """One single-session family per duration, ``turns`` requests crowding its beginning and a
    last one at its end (the recorded duration)."""
    reqs: list[TraceRequest] = []
    for f, d in enumerate(durations):
        offsets = [d * (k / turns) ** 2 if front_loaded else d * k / turns for k in range(turns)] + [d]
        for k, off in enumerate(offsets):
            reqs.append(
                TraceRequest(
                    index=len(reqs),
                    session_id=f"s{f}",
                    family_id=f"s{f}",
                    parent_session_id=None,
                    turn=k,
                    offset_s=off,
                    think_time_s=0.0,
                    prompt_tokens=12 + k,
                    output_tokens=2,
                    hash_ranges=np.empty((0, 2), dtype=np.int64),
                    prev_index=len(reqs) - 1 if k else -1,
                    model="m",
                )
            )
    return Trace(name="synthetic", block_tokens=16, requests=reqs)


def count(text: str) -> int:
    return len(text.split())


class FakeServer:
    def __init__(self) -> None:
        self.sent: list[tuple[float, str, int]] = []  # (model s, session id, turn)
        self.t0 = 0.0

    async def send(self, spec: SendSpec) -> Outcome:
        self.sent.append((asyncio.get_running_loop().time() - self.t0, spec.session_id, spec.turn))
        await asyncio.sleep(SERVICE_S)
        return Outcome(
            ok=True, status=200, ttft_s=SERVICE_S / 2, e2e_s=SERVICE_S, output_tokens=2, text="ok ok"
        )


async def _replay(plan: object, duration_s: float) -> tuple[FakeServer, ReplayResult]:
    server = FakeServer()
    replay = ClosedLoopReplay(plan, server.send, count, time_scale=1.0, duration_s=duration_s)  # type: ignore[arg-type]
    server.t0 = asyncio.get_running_loop().time()
    return server, await replay.run()


DURATIONS = [float(d) for d in np.exp(np.random.default_rng(5).uniform(np.log(20.0), np.log(400.0), size=12))]


@pytest.mark.looptime
async def test_agents_send_a_steady_request_rate_from_the_start(monkeypatch: pytest.MonkeyPatch) -> None:
    """Steady from t = 0: 200 agents through families of 100-1,000 s whose requests crowd their
    beginning, over a 400 s window; the requests sent in its last quarter and its first agree
    within the 10 % bound. The same agents all starting a fresh family at t = 0 (the steady join
    switched off) drift by far more (-60 %)."""
    durations = [
        float(d) for d in np.exp(np.random.default_rng(5).uniform(np.log(100.0), np.log(1_000.0), 12))
    ]
    plan = agent_plan(
        _trace(durations, turns=10), 200 / float(np.mean(durations)), seed=1, entry_s=0.0, token_scale=1.0
    )
    assert plan.n_agents == 200 and len(plan.families) == len(durations)
    server, result = await _replay(plan, 400.0)
    start, _, drift, ok = arrival_drift([t for t, _, _ in server.sent], 0.0, 400.0)
    assert start * 100.0 > 500 and abs(drift) <= 0.10 and ok, drift  # > 500 requests per quarter
    assert len(result.records) == len(server.sent)

    initial = SteadyAgents.initial

    def at_age_zero(self: SteadyAgents, entry_s: float = 0.0) -> list[AgentStart]:
        return [dataclasses.replace(s, start_s=0.0, enter_s=0.0) for s in initial(self, entry_s)]

    monkeypatch.setattr(SteadyAgents, "initial", at_age_zero)
    server, _ = await _replay(plan, 400.0)
    assert arrival_drift([t for t, _, _ in server.sent], 0.0, 400.0)[2] < -0.3


@pytest.mark.looptime
async def test_agents_are_seeded() -> None:
    trace = _trace(DURATIONS)
    rate = 8 / float(np.mean(DURATIONS))
    a, _ = await _replay(agent_plan(trace, rate, seed=3, entry_s=0.0, token_scale=1.0), 300.0)
    b, _ = await _replay(agent_plan(trace, rate, seed=3, entry_s=0.0, token_scale=1.0), 300.0)
    c, _ = await _replay(agent_plan(trace, rate, seed=4, entry_s=0.0, token_scale=1.0), 300.0)

    def sends(server: FakeServer) -> list[tuple[float, str, int]]:
        return sorted((round(t, 6), sid, turn) for t, sid, turn in server.sent)

    assert sends(a) == sends(b) and a.sent
    assert sends(a) != sends(c)


@pytest.mark.looptime
async def test_two_agents_in_one_family_replay_separate_copies_and_move_on() -> None:
    """One family of two turns (offsets 0 and 10, duration 10): both agents start in it (joined
    at a uniform age), each as its own copy; each starts its next family (its copy ``.1``) when its
    last answer is back, with the first turn at once."""
    trace = _trace([10.0], turns=1, front_loaded=False)  # turns at offsets 0 and 10
    plan = agent_plan(trace, 2 / 10.0, seed=0, entry_s=0.0, token_scale=1.0)
    assert plan.n_agents == agents_for_rate(0.2, 10.0) == 2
    server, _ = await _replay(plan, 25.0)
    sessions = {sid for _, sid, _ in server.sent}
    assert {"s0~a0.0", "s0~a1.0", "s0~a0.1", "s0~a1.1"} <= sessions
    for agent in (0, 1):
        mine = sorted((t, sid, turn) for t, sid, turn in server.sent if sid.startswith(f"s0~a{agent}."))
        for (t_a, sid_a, turn_a), (t_b, sid_b, turn_b) in itertools.pairwise(mine):
            if sid_a != sid_b:  # a family ended: the next one starts when its last answer is back
                assert turn_a == 1 and turn_b == 0
                assert t_b == pytest.approx(t_a + SERVICE_S, abs=1e-6)


@pytest.mark.looptime
async def test_an_agent_cut_by_the_window_starts_no_next_family() -> None:
    """The agent joins its family (turns at 0 and 100) at age 20: turn 0 is past, turn 1 is due
    at 80, after the window's end (50). That family never ended, so the agent starts none after it
    (its remaining turn counts as not sent)."""
    trace = _trace([100.0], turns=1, front_loaded=False)
    plan = agent_plan(trace, 0.01, seed=0, entry_s=0.0, token_scale=1.0)
    assert plan.n_agents == 1
    seed = next(k for k in range(100) if 10 < -SteadyAgents((100.0,), 1, k).initial()[0].start_s < 40)
    server, result = await _replay(dataclasses.replace(plan, seed=seed), 50.0)
    assert server.sent == [] and result.not_sent == 1


@pytest.mark.looptime
async def test_a_joined_family_sends_only_its_turns_due_after_joining() -> None:
    trace = _trace([10.0], turns=1, front_loaded=False)  # turns at 0 and 10
    template = family_templates(trace, 1.0)[0]
    plan = AgentPlan((template,), (10.0,), 1, seed=0, entry_s=0.0, token_scale=1.0)
    joined = plan.family_for(0, 0, 0, start_s=-4.0, from_s=0.0)
    assert joined.sends() and not plan.family_for(0, 0, 0, start_s=-11.0, from_s=0.0).sends()
    assert (
        joined.sessions[0].session_id == "s0~a0.0" and joined.sessions[0].requests[0].session_id == "s0~a0.0"
    )
    server, result = await _replay(ReplayPlan((joined,), 1.0), 0.0)
    assert server.sent == [(pytest.approx(6.0), "s0~a0.0", 1)]  # turn 0 (due at -4) skipped
    assert result.not_sent == 0


def test_stationary_plan_starts_families_before_zero_and_is_seeded() -> None:
    trace = _trace(DURATIONS)
    rate = 0.2
    plan = stationary_plan(trace, rate, seed=2, horizon_s=500.0, token_scale=1.0)
    again = stationary_plan(trace, rate, seed=2, horizon_s=500.0, token_scale=1.0)
    assert plan == again and plan != stationary_plan(trace, rate, seed=3, horizon_s=500.0, token_scale=1.0)
    starts = [f.start_s for f in plan.families]
    assert min(starts) < 0 <= max(starts) < 500.0 and all(f.sends() for f in plan.families)
    ids = [f.family_id for f in plan.families]
    assert len(set(ids)) == len(ids) and any("~" in i for i in ids)  # later clones are copies of their own
    # about rate x (lead + horizon) arrivals, those over before t = 0 left out
    assert 0.5 * rate * 500 < sum(1 for s in starts if s >= 0) < 1.5 * rate * 500


def test_agent_plan_rejects_what_it_cannot_replay() -> None:
    template = PlannedFamily("f", 0.0, ())
    with pytest.raises(ValueError, match="duration"):
        AgentPlan((template,), (), 1, 0, 0.0, 1.0)
    with pytest.raises(ValueError, match="n_agents"):
        AgentPlan((template,), (1.0,), 0, 0, 0.0, 1.0)
    with pytest.raises(ValueError, match="n_agents"):
        AgentPlan((template,), (1.0,), 1, 0, float("nan"), 1.0)
