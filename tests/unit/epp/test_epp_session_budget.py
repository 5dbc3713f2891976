"""The picker's half of the adaptive session budget (``flowControl.sessionMissShare``;
epp/server/sessions.py over smetric.policy.session_budget): a request of a new session gets a 429
(reason ``sessions``) once the live sessions' returning turns miss their prompt; live sessions,
and requests without a session, go on. Real gRPC for the servicer's answer, fake index."""

from __future__ import annotations

import asyncio
import contextlib

import orjson
import pytest

from smetric.core.views import RequestView
from smetric.epp.server.decide import Picker
from smetric.epp.server.flow import FlowShed
from smetric.epp.server.servicer import ExtProcServicer
from smetric.epp.server.sessions import PickerSessions
from smetric.epp.server.static import StaticEndpointSource
from smetric.policy.base import PolicyParams
from smetric.policy.flowcontrol import FlowControlConfig, FlowGate
from smetric.policy.framework import Router
from smetric.policy.registry import make_policy
from tests.support.epp_harness import BASE_HEADERS, EPS, FakeIndex, body_msgs, build, chat, headers_msg

TEXT = "x" * 8_000  # 2,000 tokens to the fake index


class Clock:
    def __init__(self) -> None:
        self.now = 0.0

    def __call__(self) -> float:
        return self.now


def _picker(miss_share: float) -> tuple[Picker, FakeIndex, Clock]:
    params, index, clock = PolicyParams(), FakeIndex(), Clock()
    cfg = FlowControlConfig(enabled=True, session_miss_share=miss_share, session_window=2)
    p = Picker(
        StaticEndpointSource(EPS),
        index,
        Router(make_policy("smetric", params)),
        params.cost_model,
        is_stale=lambda a: False,
        clock=clock,
        flow_gate=FlowGate(cfg, params),
    )
    return p, index, clock


def _turn(p: Picker, session: str | None, n: int) -> None:
    """One request of ``session`` decided now; its ledger entry released (so the gate stays open)."""
    rid = f"{session}-{n}"
    p.pick(RequestView(rid, prompt_tokens=2_000, turn=n, session_id=session), TEXT, waited_s=0.0)
    p.core.ledger.remove(rid)


def test_a_new_session_is_refused_once_the_live_sessions_returning_turns_miss() -> None:
    """Three sessions start (first turns: cold by nature, not counted); two returning turns find
    nothing of their prompt held (window 2, share 0.3: a miss window), so the count halves from the
    three live sessions to one: a fourth session gets FlowShed("sessions"); the live ones and a
    request without a session go on. Guard off (no share): the fourth goes too."""
    for share, refused in ((0.3, True), (0.0, False)):
        p, _, _ = _picker(share)
        assert (p.sessions is not None) is refused
        for s in ("s0", "s1", "s2"):
            _turn(p, s, 0)
        _turn(p, "s0", 1)  # nothing held: a miss
        _turn(p, "s1", 1)
        if not refused:
            _turn(p, "s3", 0)
            continue
        with pytest.raises(FlowShed) as exc:
            _turn(p, "s3", 0)
        assert exc.value.reason == "sessions" and not exc.value.counted
        _turn(p, "s2", 1)  # a live session always goes
        _turn(p, None, 0)  # no session named: not counted


def test_returning_turns_that_find_their_prompt_held_never_bind_the_budget() -> None:
    """Every endpoint holds the session's prefix (1,900 of 2,000 tokens): no miss, no count."""
    p, index, _ = _picker(0.3)
    index.hits = dict.fromkeys(EPS, 1_900)
    for s in ("s0", "s1", "s2"):
        _turn(p, s, 0)
    for n in range(1, 4):
        _turn(p, "s0", n)
        _turn(p, "s1", n)
    assert p.sessions is not None and p.sessions.budget.limit == 0
    _turn(p, "s3", 0)


def test_a_finished_turn_keeps_its_session_live() -> None:
    """Live until idle sessionIdleS (60 s) from its last admitted or finished request: admitted at
    0 s and finished at 50 s, it is live at 100 s; without the finish it went at 60 s."""
    for finish, live in ((True, True), (False, False)):
        p, _, clock = _picker(0.3)
        _turn(p, "s0", 0)
        clock.now = 50.0
        if finish:
            p.on_session_end("s0")
        clock.now = 100.0
        assert p.sessions is not None
        assert p.sessions.budget.admits("probe", clock.now) and (hash("s0") in p.sessions.budget) is live


def _servicer(cfg: FlowControlConfig) -> tuple[ExtProcServicer, PickerSessions]:
    """A servicer over the harness's pool with flow control ``cfg`` and its session budget."""
    servicer0, *_ = build()
    picker = servicer0.picker
    picker.flow_gate = FlowGate(cfg, PolicyParams())
    sessions = PickerSessions.from_config(cfg, picker.clock)
    assert sessions is not None
    picker.sessions = sessions
    return ExtProcServicer(picker, servicer0.metrics, servicer0.settings), sessions


async def _send(serve: object, servicer: ExtProcServicer, session: str) -> tuple[object, object]:
    """A chat request of ``session``: the open call and the picker's first answer."""
    stub = await serve(servicer)  # type: ignore[operator]
    call = stub.Process()
    await call.write(headers_msg({**BASE_HEADERS, "x-session-token": session}))
    for m in body_msgs(chat()):
        await call.write(m)
    return call, await asyncio.wait_for(call.read(), 5.0)


async def test_the_servicer_answers_a_refused_session_with_429_and_counts_it(serve: object) -> None:
    """The refusal is an immediate 429 with Retry-After, counted as reason ``sessions``."""
    servicer, sessions = _servicer(FlowControlConfig(enabled=True, session_miss_share=0.3, retry_after_s=3.0))
    sessions.budget.touch(hash("someone-else"), sessions.clock(), 1_000)
    sessions.budget._limit = 1  # the budget binds (as after a miss window)
    _, resp = await _send(serve, servicer, "new-session")
    imm = resp.immediate_response  # type: ignore[attr-defined]
    assert imm.status.code == 429
    hdrs = {h.header.key: h.header.raw_value.decode() for h in imm.headers.set_headers}
    assert hdrs.get("retry-after") == "3"
    assert b"live sessions" in orjson.loads(imm.body)["error"]["message"].encode()
    count = servicer.metrics.registry.get_sample_value(
        "smetric_epp_flow_control_shed_total", {"reason": "sessions"}
    )
    assert count == 1


async def test_the_servicer_reports_a_routed_requests_end_to_its_session(serve: object) -> None:
    """The stream's end (settled: here the client closing after the route) refreshes the session's
    last-seen time, so a long turn does not outlive its session. Guard: ResponseHooks.on_session_end."""
    servicer, sessions = _servicer(FlowControlConfig(enabled=True, session_miss_share=0.3))
    call, resp = await _send(serve, servicer, "agent-1")
    assert resp.HasField("request_headers")  # type: ignore[attr-defined]  # routed: live from its admission
    live = sessions.budget._live
    admitted_s = live[hash("agent-1")][0]
    await asyncio.sleep(0.05)
    await call.done_writing()  # type: ignore[attr-defined]
    with contextlib.suppress(Exception):
        await asyncio.wait_for(call.read(), 2.0)  # type: ignore[attr-defined]  # the end of the stream
    for _ in range(50):  # the server settles the stream after the client's close
        if live[hash("agent-1")][0] > admitted_s:
            break
        await asyncio.sleep(0.02)
    assert live[hash("agent-1")][0] > admitted_s


def test_the_picker_counts_sessions_only_when_asked() -> None:
    """Flow control on without ``sessionMissShare``, or off with it: no session budget."""
    assert _picker(0.0)[0].sessions is None
    assert _picker(0.3)[0].sessions is not None
    off = FlowControlConfig(enabled=False, session_miss_share=0.3)
    assert PickerSessions.from_config(off, Clock()) is None
