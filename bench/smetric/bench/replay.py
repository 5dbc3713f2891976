"""Closed-loop replay: one task per session (a :class:`ReplayPlan`) or per agent (an
:class:`AgentPlan`: the agent runs its family's sessions, then starts its next family when every
one of them has finished). A request is sent at
``max(family start + recorded offset, previous response of the session done + think time)`` on the
model clock (the simulator's rule, :func:`smetric.trace.workload.closed_loop_send_time`), and the
wall clock is the model clock times ``time_scale``. A session's first request goes at its family's
start plus its recorded offset, so sub-agents start where the trace put them relative to their
parent. A family under way when the replay (or its agent) joins it sends only its requests due
from then on (``PlannedFamily.from_s``).

Requests whose send time would fall after the replay window (``duration_s``) are not sent and
counted as ``not_sent``; requests in flight at the window's end may finish until the drain deadline
(``drain_s`` wall seconds later), after which they are cancelled and recorded as failed
(``timed out``), so one stuck request cannot hide a whole row's results.
"""

from __future__ import annotations

import asyncio
import itertools
from collections.abc import Awaitable, Callable
from dataclasses import dataclass
from typing import Any

from smetric.bench.plan import AgentPlan, PlannedFamily, PlannedSession, ReplayPlan
from smetric.bench.synth import Conversation, Message, TokenCount
from smetric.trace.workload import AgentStart, SteadyAgents, closed_loop_send_time


@dataclass(frozen=True, slots=True)
class SendSpec:
    request_id: str
    session_id: str
    family_id: str
    turn: int
    messages: tuple[Message, ...]
    max_tokens: int
    prompt_tokens: int  # measured on the synthesised messages


@dataclass(frozen=True, slots=True)
class Outcome:
    """What the client observed for one request (times in wall seconds)."""

    ok: bool
    status: int = 0
    error: str = ""
    ttft_s: float = float("nan")
    e2e_s: float = float("nan")
    output_tokens: int = 0
    prompt_tokens: int = 0  # from the server's usage (0 when not reported)
    cached_tokens: int = -1  # usage.prompt_tokens_details.cached_tokens (-1 when not reported)
    text: str = ""
    served_by: str = ""  # endpoint that served it, when the server says so
    retry_after_s: float = 1.0  # a refusal's Retry-After (seconds)
    retries_429: int = 0  # resends after 429 (flow control) before this outcome
    # The server's own first/last-token times since it received the request (wall s; NaN when the
    # server does not report them, e.g. a real vLLM): the part of ttft_s / e2e_s spent in the engine.
    server_ttft_s: float = float("nan")
    server_e2e_s: float = float("nan")
    # The emulated engine's modelled times for it (model seconds; NaN when not reported).
    engine_ttft_model_s: float = float("nan")
    engine_e2e_model_s: float = float("nan")


@dataclass(frozen=True, slots=True)
class RequestRecord:
    session_id: str
    family_id: str
    turn: int
    scheduled_s: float  # wall seconds since the replay started
    sent_s: float
    prompt_tokens: int  # the server's count when reported, else the synthesised count
    max_tokens: int
    outcome: Outcome

    @property
    def tpot_s(self) -> float:
        o = self.outcome
        if not o.ok or o.output_tokens < 2:
            return 0.0
        return (o.e2e_s - o.ttft_s) / (o.output_tokens - 1)


SendFn = Callable[[SendSpec], Awaitable[Outcome]]


@dataclass(frozen=True, slots=True)
class ReplayResult:
    records: tuple[RequestRecord, ...]
    not_sent: int
    wall_s: float


class ClosedLoopReplay:
    def __init__(
        self,
        plan: ReplayPlan | AgentPlan,
        send: SendFn,
        count: TokenCount,
        time_scale: float,
        duration_s: float = 0.0,
        seed: int = 0,
        shared_system_prompt: bool = False,
        on_record: Callable[[RequestRecord], None] | None = None,
        drain_s: float = float("inf"),
        on_send: Callable[[SendSpec], None] | None = None,
    ) -> None:
        if not time_scale > 0:
            raise ValueError("time_scale must be > 0")
        self.plan = plan
        self.send = send
        self.count = count
        self.time_scale = time_scale
        self.duration_s = duration_s
        self.seed = seed
        self.shared_system_prompt = shared_system_prompt
        self.on_record = on_record
        self.drain_s = drain_s
        self.on_send = on_send  # called as each request goes out (progress counts sent, not planned)
        self._in_flight: dict[str, tuple[SendSpec, float, float]] = {}  # request id -> spec, scheduled, sent
        self._records: list[RequestRecord] = []
        self._not_sent = 0

    async def run(self) -> ReplayResult:
        loop = asyncio.get_running_loop()
        t0 = loop.time()
        deadline = t0 + self.duration_s * self.time_scale if self.duration_s > 0 else float("inf")
        plan = self.plan
        tasks: list[asyncio.Task[Any]]
        if isinstance(plan, AgentPlan):
            agents = plan.agents()
            tasks = [
                asyncio.create_task(self._agent(plan, agents, j, t0, deadline), name=f"agent {j.agent}")
                for j in agents.initial(plan.entry_s)
            ]
        else:
            tasks = [
                asyncio.create_task(self._session(family, session, t0, deadline), name=session.session_id)
                for family in plan.families
                for session in family.sessions
            ]
        hard_deadline = deadline + self.drain_s if self.duration_s > 0 else float("inf")
        timeout = None if hard_deadline == float("inf") else max(0.0, hard_deadline - loop.time())
        try:
            pending: set[asyncio.Task[Any]] = set()
            if tasks:
                _, pending = await asyncio.wait(tasks, timeout=timeout)
            if pending:  # the drain deadline passed: what is still in flight counts as failed
                for spec, scheduled, sent in list(self._in_flight.values()):
                    outcome = Outcome(ok=False, error=f"timed out {self.drain_s:g} s after the replay window")
                    self._record(spec, scheduled, sent, outcome)
        finally:
            for task in tasks:
                task.cancel()
            results = await asyncio.gather(*tasks, return_exceptions=True)
        failures = [r for r in results if isinstance(r, Exception)]
        if failures:
            raise failures[0]
        records = tuple(sorted(self._records, key=lambda r: r.sent_s))
        return ReplayResult(records, self._not_sent, loop.time() - t0)

    async def _agent(
        self, plan: AgentPlan, agents: SteadyAgents, joined: AgentStart, t0: float, deadline: float
    ) -> None:
        """One agent: its family's sessions, then its next family from when the last one ended
        (the simulator's ``start_family`` / ``session_ended``); it stops when a session of its
        family is cut by the window's end (that family never ended)."""
        loop = asyncio.get_running_loop()
        horizon = (deadline - t0) / self.time_scale
        family, start_s, from_s = joined.family, joined.start_s, joined.enter_s
        for n in itertools.count():
            if start_s >= horizon:
                return
            planned = plan.family_for(family, joined.agent, n, start_s, from_s)
            if planned.sends():
                ended = await asyncio.gather(
                    *(self._session(planned, s, t0, deadline) for s in planned.sessions)
                )
                if not all(ended):
                    return
                start_s = (loop.time() - t0) / self.time_scale
            else:  # joined after its last send: the family ends at its recorded end
                start_s = max(start_s + plan.durations_s[family], start_s + 1e-9, from_s)
            from_s = start_s
            family = agents.next_family(joined.agent)

    async def _session(
        self, family: PlannedFamily, session: PlannedSession, t0: float, deadline: float
    ) -> bool:
        """Replay one session; False when the window's end cut it (its last turns not sent)."""
        loop = asyncio.get_running_loop()
        ts = self.time_scale
        # Shared: one system prompt per model (the trace hashes families apart; see docs/bench.md).
        key = (session.model or "model") if self.shared_system_prompt else ""
        conv = Conversation(session.session_id, self.seed, self.count, key)
        prev_done_model_s: float | None = None
        for i, req in enumerate(session.requests):
            if family.start_s + req.offset_s < family.from_s:
                continue  # due before the family was joined: not replayed
            # The simulator's rule, on the model clock: max(family start + offset, prev done + think).
            at_model_s = closed_loop_send_time(
                family.start_s, req.offset_s, prev_done_model_s, req.think_time_s
            )
            send_at = t0 + at_model_s * ts
            if send_at > deadline:
                self._not_sent += len(session.requests) - i
                return False
            delay = send_at - loop.time()
            if delay > 0:
                await asyncio.sleep(delay)
            turn = conv.next_turn(req.prompt_tokens, req.system_tokens, req.force_reset)
            spec = SendSpec(
                request_id=f"{session.session_id}#{req.turn}",
                session_id=session.session_id,
                family_id=family.family_id,
                turn=req.turn,
                messages=turn.messages,
                max_tokens=req.output_tokens,
                prompt_tokens=turn.prompt_tokens,
            )
            sent = loop.time()
            self._in_flight[spec.request_id] = (spec, send_at - t0, sent - t0)
            if self.on_send is not None:
                self.on_send(spec)
            outcome = await self.send(spec)
            del self._in_flight[spec.request_id]
            prev_done_model_s = (loop.time() - t0) / ts
            if outcome.ok:
                conv.add_answer(outcome.text)
            self._record(spec, send_at - t0, sent - t0, outcome)
        return True

    def _record(self, spec: SendSpec, scheduled_s: float, sent_s: float, outcome: Outcome) -> None:
        record = RequestRecord(
            session_id=spec.session_id,
            family_id=spec.family_id,
            turn=spec.turn,
            scheduled_s=scheduled_s,
            sent_s=sent_s,
            prompt_tokens=outcome.prompt_tokens or spec.prompt_tokens,
            max_tokens=spec.max_tokens,
            outcome=outcome,
        )
        self._records.append(record)
        if self.on_record is not None:
            self.on_record(record)
