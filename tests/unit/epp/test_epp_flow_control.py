"""Flow control in the picker (epp/server/flow.py): a request no endpoint can serve within its SLO
waits in a bounded queue (the ext_proc stream is held), is routed when capacity frees, and gets
429 + Retry-After when the queue is full or it waited past its TTL. Real gRPC, fake index."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence

import orjson

from smetric.core.views import EndpointSnapshot, RequestView
from smetric.epp.server.servicer import ExtProcServicer
from smetric.policy.base import PolicyParams
from smetric.policy.flowcontrol import FlowControlConfig, FlowGate
from smetric.policy.pickerconfig import validate_config
from tests.support.epp_harness import BASE_HEADERS, body_msgs, build, chat, headers_msg


class SwitchGate(FlowGate):
    """The real gate's config and deadline, capacity switched by the test."""

    def __init__(self, cfg: FlowControlConfig) -> None:
        super().__init__(cfg, PolicyParams())
        self.open = False
        self.budget: int | None = None  # when set: this many requests get capacity, then none
        self.doom_first = (
            False  # the first request asked about is one no endpoint could serve in time even idle
        )
        self._doomed: str | None = None

    def hopeless(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> bool:
        if not (self.config.hopeless_last and self.doom_first):
            return False
        if self._doomed is None:
            self._doomed = request.request_id
        return request.request_id == self._doomed

    def capable(
        self, request: RequestView, endpoints: Sequence[EndpointSnapshot], waited_s: float = 0.0
    ) -> list[bool]:
        if self.budget is not None:
            self.budget -= 1
            return [self.budget >= 0] * len(endpoints)
        return [self.open] * len(endpoints)


def with_flow(**kw: object) -> tuple[ExtProcServicer, SwitchGate]:
    servicer0, *_ = build()
    gate = SwitchGate(FlowControlConfig(enabled=True, **kw))  # type: ignore[arg-type]
    servicer0.picker.flow_gate = gate
    servicer = ExtProcServicer(servicer0.picker, servicer0.metrics, servicer0.settings)
    return servicer, gate


def sample(servicer: ExtProcServicer, name: str, labels: dict[str, str] | None = None) -> float:
    return servicer.metrics.registry.get_sample_value(name, labels or {}) or 0.0


async def send(stub: object, rid: str, text: str = "hello") -> object:
    call = stub.Process()  # type: ignore[attr-defined]
    await call.write(headers_msg({**BASE_HEADERS, "x-request-id": rid}))
    for m in body_msgs(chat(text=text)):
        await call.write(m)
    return call


async def test_held_request_is_routed_when_capacity_frees(serve: object) -> None:
    servicer, gate = with_flow(ttl_s=30.0)
    stub = await serve(servicer)  # type: ignore[operator]
    call = await send(stub, "r1")
    read = asyncio.ensure_future(call.read())  # type: ignore[attr-defined]
    await asyncio.sleep(0.3)
    assert not read.done()  # held: no answer while no endpoint has capacity
    assert sample(servicer, "inference_extension_flow_control_queue_size") == 1
    gate.open = True
    assert servicer.flow is not None
    servicer.flow.kick()
    resp = await asyncio.wait_for(read, 5.0)
    assert resp.HasField("request_headers")  # routed
    assert len(servicer.picker.ledger) == 1
    assert sample(servicer, "inference_extension_flow_control_queue_size") == 0
    assert (
        sample(
            servicer,
            "inference_extension_flow_control_request_queue_duration_seconds_count",
            {"priority": "0", "outcome": "dispatched"},
        )
        == 1
    )
    call.cancel()  # type: ignore[attr-defined]


async def test_a_request_waiting_past_its_ttl_gets_429_with_retry_after(serve: object) -> None:
    servicer, _ = with_flow(ttl_s=0.3, retry_after_s=1.5)
    stub = await serve(servicer)  # type: ignore[operator]
    call = await send(stub, "r1")
    resp = await asyncio.wait_for(call.read(), 5.0)  # type: ignore[attr-defined]  # guard off: no answer
    imm = resp.immediate_response
    assert imm.status.code == 429
    hdrs = {h.header.key: h.header.raw_value.decode() for h in imm.headers.set_headers}
    assert hdrs.get("retry-after") == "2"
    assert b"ttl" in orjson.loads(imm.body)["error"]["message"].encode()
    assert sample(servicer, "smetric_epp_flow_control_shed_total", {"reason": "ttl"}) == 1
    assert len(servicer.picker.ledger) == 0
    assert servicer.flow is not None and len(servicer.flow) == 0


async def test_a_resend_after_a_429_waits_below_a_fresh_request(serve: object) -> None:
    """late_last: the picker remembers what it refused (a body fingerprint); the resend of that
    body is late (its TTFT counts from the first send) and goes after a fresh request queued
    after it. Guard off (late_last=False): FIFO, the resend is routed first and the fresh one waits."""
    servicer, gate = with_flow(ttl_s=0.3, late_last=True)
    stub = await serve(servicer)  # type: ignore[operator]
    first = await send(stub, "r1", text="refused once")
    resp = await asyncio.wait_for(first.read(), 5.0)  # type: ignore[attr-defined]
    assert resp.immediate_response.status.code == 429
    assert servicer.flow is not None and len(servicer.flow.late) == 1
    longer = FlowControlConfig(enabled=True, ttl_s=30.0, late_last=True)
    servicer.picker.flow_gate = gate = SwitchGate(longer)  # a reloaded config: a 30 s TTL
    servicer.flow.reconfigure(longer)
    resend = await send(stub, "r1-again", text="refused once")
    await asyncio.sleep(0.2)  # the resend is queued first ...
    fresh = await send(stub, "r2", text="a new question")
    await asyncio.sleep(0.2)
    assert len(servicer.flow) == 2
    gate.budget = 1  # capacity for one request
    servicer.flow.kick()
    answered = await asyncio.wait_for(fresh.read(), 5.0)  # type: ignore[attr-defined]
    assert answered.HasField("request_headers")  # ... and the fresh one is routed
    assert len(servicer.flow) == 1 and len(servicer.flow.late) == 0
    gate.budget = None
    gate.open = True
    servicer.flow.kick()
    assert (await asyncio.wait_for(resend.read(), 5.0)).HasField("request_headers")  # type: ignore[attr-defined]
    for call in (resend, fresh):
        call.cancel()  # type: ignore[attr-defined]


async def test_a_full_queue_refuses_at_once(serve: object) -> None:
    servicer, _ = with_flow(ttl_s=30.0, max_queued=1)
    stub = await serve(servicer)  # type: ignore[operator]
    first = await send(stub, "r1")
    await asyncio.sleep(0.2)
    second = await send(stub, "r2")
    resp = await asyncio.wait_for(second.read(), 5.0)  # type: ignore[attr-defined]
    assert resp.immediate_response.status.code == 429
    assert sample(servicer, "smetric_epp_flow_control_shed_total", {"reason": "capacity"}) == 1
    first.cancel()  # type: ignore[attr-defined]


async def test_flow_control_off_routes_as_before(serve: object) -> None:
    servicer, *_ = build()
    assert servicer.flow is None
    stub = await serve(servicer)  # type: ignore[operator]
    call = await send(stub, "r1")
    resp = await asyncio.wait_for(call.read(), 5.0)  # type: ignore[attr-defined]
    assert resp.HasField("request_headers")
    call.cancel()  # type: ignore[attr-defined]


def test_config_section_parses_and_validates() -> None:
    cfg = validate_config({"flowControl": {"enabled": True, "maxQueued": 64, "ttlS": 10}})
    fc = cfg.flowControl.config()
    assert fc.enabled and fc.max_queued == 64 and fc.ttl_s == 10
    assert fc.late_last and fc.tpot_guard  # on by default (docs/overload.md)
    off = validate_config({"flowControl": {"enabled": True, "lateLast": False, "tpotGuard": False}})
    assert not off.flowControl.config().late_last and not off.flowControl.config().tpot_guard
    assert validate_config({}).flowControl.enabled  # on by default since 6 Dec 2026 (docs/overload.md)
    assert not validate_config({"flowControl": {"enabled": False}}).flowControl.config().enabled
    try:
        validate_config({"flowControl": {"maxQueued": 0}})
    except ValueError as exc:
        assert "maxQueued" in str(exc)
    else:  # pragma: no cover
        raise AssertionError("maxQueued 0 accepted")


async def test_a_reload_that_turns_flow_control_on_holds_new_requests(serve: object) -> None:
    """The config reload (servicer.use_picker) builds the queue the initial config did not have;
    without it the new picker's gate is never consulted and the request is routed at once."""
    servicer, *_ = build()
    assert servicer.flow is None
    picker = servicer.picker
    gate = SwitchGate(FlowControlConfig(enabled=True, ttl_s=30.0))
    picker.flow_gate = gate
    servicer.use_picker(picker, ())
    stub = await serve(servicer)  # type: ignore[operator]
    call = await send(stub, "r1")
    read = asyncio.ensure_future(call.read())  # type: ignore[attr-defined]
    await asyncio.sleep(0.3)
    assert not read.done()  # held
    gate.open = True
    assert servicer.flow is not None
    servicer.flow.kick()
    assert (await asyncio.wait_for(read, 5.0)).HasField("request_headers")
    call.cancel()  # type: ignore[attr-defined]


async def test_a_reload_applies_the_new_queue_bound_and_ttl(serve: object) -> None:
    servicer, _ = with_flow(ttl_s=30.0, max_queued=1)
    new_gate = SwitchGate(FlowControlConfig(enabled=True, ttl_s=0.3, max_queued=2))
    servicer.picker.flow_gate = new_gate
    servicer.use_picker(servicer.picker, ())
    stub = await serve(servicer)  # type: ignore[operator]
    first = await send(stub, "r1")
    second = await send(stub, "r2")
    for call in (first, second):  # both held (bound 2, not 1), then shed at the new 0.3 s TTL
        resp = await asyncio.wait_for(call.read(), 5.0)  # type: ignore[attr-defined]
        assert resp.immediate_response.status.code == 429
    assert sample(servicer, "smetric_epp_flow_control_shed_total", {"reason": "ttl"}) == 2
    assert sample(servicer, "smetric_epp_flow_control_shed_total", {"reason": "capacity"}) == 0


async def _doomed_then_fresh(
    serve: object, hopeless_last: bool
) -> tuple[ExtProcServicer, SwitchGate, object, object]:
    """A request no endpoint could serve in time even idle, then a fresh one, both held (the gate is closed);
    then capacity for one request."""
    servicer, gate = with_flow(ttl_s=30.0, hopeless_last=hopeless_last)
    gate.doom_first = True
    stub = await serve(servicer)  # type: ignore[operator]
    doomed = await send(stub, "doomed", text="a long prompt no cache holds")
    await asyncio.sleep(0.2)
    fresh = await send(stub, "fresh", text="a short follow-up")
    await asyncio.sleep(0.2)
    assert servicer.flow is not None and len(servicer.flow) == 2
    gate.budget = 1
    servicer.flow.kick()
    return servicer, gate, doomed, fresh


async def test_a_hopeless_request_waits_below_a_fresh_one(serve: object) -> None:
    """hopelessLast: a request no endpoint could serve within its SLO even idle is queued with the late ones, so
    capacity goes first to a fresh request that can still make its SLO, though the hopeless one came first."""
    servicer, gate, doomed, fresh = await _doomed_then_fresh(serve, hopeless_last=True)
    assert (await asyncio.wait_for(fresh.read(), 5.0)).HasField("request_headers")  # type: ignore[attr-defined]
    assert servicer.flow is not None and len(servicer.flow) == 1
    gate.budget = None
    gate.open = True
    servicer.flow.kick()
    assert (await asyncio.wait_for(doomed.read(), 5.0)).HasField("request_headers")  # type: ignore[attr-defined]
    for call in (doomed, fresh):
        call.cancel()  # type: ignore[attr-defined]


async def test_without_hopeless_last_the_hopeless_request_goes_first(serve: object) -> None:
    """The guard off: the same two requests are served in arrival order, the hopeless one first."""
    servicer, _, doomed, fresh = await _doomed_then_fresh(serve, hopeless_last=False)
    assert (await asyncio.wait_for(doomed.read(), 5.0)).HasField("request_headers")  # type: ignore[attr-defined]
    assert servicer.flow is not None and len(servicer.flow) == 1
    for call in (doomed, fresh):
        call.cancel()  # type: ignore[attr-defined]


async def test_a_hopeless_request_on_an_idle_pool_is_routed_at_once(serve: object) -> None:
    """Nothing fresh waits: the hopeless request passes through the queue (counted as dispatched from it) and is
    routed at once, not at the next dispatch tick (set to 30 s here, past the read's 5 s bound)."""
    servicer, gate = with_flow(ttl_s=30.0, hopeless_last=True)
    gate.doom_first = True
    gate.open = True
    assert servicer.flow is not None
    servicer.flow.tick_s = 30.0
    stub = await serve(servicer)  # type: ignore[operator]
    doomed = await send(stub, "doomed", text="a long prompt no cache holds")
    assert (await asyncio.wait_for(doomed.read(), 5.0)).HasField("request_headers")  # type: ignore[attr-defined]
    assert len(servicer.flow) == 0
    dispatched = {"priority": "0", "outcome": "dispatched"}
    assert (
        sample(servicer, "inference_extension_flow_control_request_queue_duration_seconds_count", dispatched)
        == 1
    )
    doomed.cancel()  # type: ignore[attr-defined]
