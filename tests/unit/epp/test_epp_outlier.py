"""The picker's passive outlier detection (smetric.epp.server.outlier): errors -> ejected ->
half-open -> probe -> readmitted, and what the picker's decisions make of it."""

from __future__ import annotations

import dataclasses

import grpc
import pytest
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep

from smetric.core.views import RequestView
from smetric.epp.server.decide import Pick, Picker
from smetric.epp.server.outlier import OutlierDetector, OutlierSettings, is_error_status
from smetric.epp.server.response_path import _int_header
from smetric.epp.server.servicer import ExtProcServicer
from smetric.epp.server.static import StaticEndpointSource
from smetric.epp.settings import PickerSettings
from smetric.policy.base import PolicyParams
from smetric.policy.framework import Router
from smetric.policy.registry import make_policy
from tests.support.epp_harness import (
    BASE_HEADERS,
    EPS,
    FakeIndex,
    body_msgs,
    build,
    chat,
    headers_msg,
    set_headers,
)

SETTINGS = OutlierSettings(consecutive_errors=3, base_ejection_s=10.0, max_ejection_s=300.0)
A, B, C = EPS


class Clock:
    def __init__(self) -> None:
        self.t = 1000.0

    def __call__(self) -> float:
        return self.t


def detector(settings: OutlierSettings = SETTINGS) -> tuple[OutlierDetector, Clock]:
    clock = Clock()
    return OutlierDetector(settings, clock), clock


# -- the state machine ------------------------------------------------------------------------------


def test_three_errors_in_a_row_eject_then_a_probe_readmits() -> None:
    o, clock = detector()
    assert not o.failed(A) and not o.failed(A)
    assert o.state(A) == "closed" and not o.excluded(A)
    assert o.failed(A)  # the third in a row
    assert o.state(A) == "ejected" and o.excluded(A) and o.ejected_count() == 1
    clock.t += 9.9
    assert o.excluded(A)
    clock.t += 0.2  # ejection over: half-open, a candidate again
    assert o.state(A) == "half-open" and not o.excluded(A)
    o.dispatched(A)  # the request routed to it is the probe: nothing else until it answers
    assert o.state(A) == "probing" and o.excluded(A)
    assert o.succeeded(A)
    assert o.state(A) == "closed" and not o.excluded(A) and o.ejected_count() == 0


def test_a_success_between_errors_resets_the_count() -> None:
    o, _ = detector()
    o.failed(A)
    o.failed(A)
    o.succeeded(A)
    assert not o.failed(A) and not o.failed(A)
    assert o.state(A) == "closed"


def test_a_failed_probe_ejects_longer_up_to_the_cap() -> None:
    o, clock = detector(OutlierSettings(consecutive_errors=1, base_ejection_s=10.0, max_ejection_s=25.0))
    assert o.failed(A)
    for expected in (20.0, 25.0, 25.0):  # base x times ejected, capped
        clock.t += 30.0
        o.dispatched(A)
        assert o.state(A) == "probing"
        assert o.failed(A)
        clock.t += expected - 0.1
        assert o.excluded(A)
        clock.t += 0.2
        assert not o.excluded(A)


def test_a_relapse_long_after_readmission_starts_from_the_base_ejection() -> None:
    o, clock = detector(OutlierSettings(consecutive_errors=1, base_ejection_s=10.0, max_ejection_s=300.0))
    o.failed(A)
    clock.t += 10.0
    o.dispatched(A)
    o.succeeded(A)
    clock.t += 60.0  # healthy for a while
    assert o.failed(A)
    clock.t += 10.1
    assert not o.excluded(A)


def test_a_probe_that_never_answers_allows_another_after_the_base_ejection() -> None:
    o, clock = detector()
    for _ in range(3):
        o.failed(A)
    clock.t += 10.0
    o.dispatched(A)
    clock.t += 9.0
    assert o.excluded(A)
    clock.t += 1.1
    assert not o.excluded(A) and o.state(A) == "half-open"


def test_answers_to_requests_sent_before_the_ejection_change_nothing() -> None:
    o, clock = detector()
    for _ in range(3):
        o.failed(A)
    assert not o.succeeded(A) and o.excluded(A)  # a late 200 does not readmit it
    assert not o.failed(A) and o.excluded(A)  # nor does a late error eject it again
    clock.t += 10.1
    assert not o.excluded(A)


def test_retry_after_holds_the_endpoint_at_once_and_extends_an_ejection() -> None:
    o, clock = detector()
    assert not o.failed(A, retry_after_s=4.0)  # one 429 with Retry-After: 4 -> out for 4 s
    assert o.excluded(A)
    clock.t += 4.1
    assert not o.excluded(A)
    o.failed(A)
    o.failed(A)  # third error: ejected for the base 10 s
    assert o.excluded(A)
    o.failed(A, retry_after_s=1000.0)  # capped at max_ejection_s
    clock.t += 299.0
    assert o.excluded(A)
    clock.t += 2.0
    assert not o.excluded(A)


def test_off_and_forget() -> None:
    o, _ = detector(OutlierSettings(consecutive_errors=0, base_ejection_s=10.0, max_ejection_s=300.0))
    assert not any(o.failed(A) for _ in range(10)) and not o.excluded(A)
    o, _ = detector()
    for _ in range(3):
        o.failed(A)
    o.forget(A)
    assert not o.excluded(A) and o.state(A) == "closed"


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError):
        OutlierSettings(consecutive_errors=-1, base_ejection_s=1.0, max_ejection_s=2.0)
    with pytest.raises(ValueError):
        OutlierSettings(consecutive_errors=3, base_ejection_s=5.0, max_ejection_s=2.0)
    with pytest.raises(SystemExit):
        PickerSettings.from_argv(["--outlier-consecutive-errors=x"])


def test_error_statuses_and_header_parsing() -> None:
    assert [s for s in (200, 400, 404, 429, 500, 503, 504, 0) if is_error_status(s)] == [429, 500, 503, 504]
    assert [_int_header(v) for v in ("3", " 12 ", "", "abc", "-1", "Wed, 21 Oct 2015", "²", "9" * 40)] == [
        3,
        12,
        0,
        0,
        0,
        0,
        0,
        86_400,
    ]


def test_the_flag_defaults() -> None:
    assert PickerSettings.defaults().outlier == SETTINGS


# -- the picker's decisions -------------------------------------------------------------------------


def picker(settings: OutlierSettings = SETTINGS) -> tuple[Picker, FakeIndex, Clock]:
    clock = Clock()
    index = FakeIndex()
    params = PolicyParams()
    p = Picker(
        StaticEndpointSource(EPS),
        index,
        Router(make_policy("smetric", params)),
        params.cost_model,
        clock=clock,
        is_stale=lambda a: False,
        outliers=OutlierDetector(settings, clock),
    )
    return p, index, clock


def turn(p: Picker, n: int) -> Pick:
    """The next turn of a session whose prefix ``A`` holds (the policy keeps it there)."""
    pick = p.pick(RequestView(f"r{n}", prompt_tokens=4000, turn=1, est_hit_tokens=3900), "x" * 16000)
    p.on_prefill_done(pick, f"r{n}")
    return pick


def test_a_failing_engine_draws_no_session_once_ejected_and_its_sessions_move() -> None:
    """Fails with the guard off (``--outlier-consecutive-errors=0``): every turn stays on A."""
    p, index, clock = picker()
    index.hits = {A: 3900}
    first = [turn(p, n) for n in range(3)]
    assert [x.destination for x in first] == [A, A, A]  # sticky: the session's prefix is on A
    for pick in first:
        p.on_response(pick, 503)
    later = [turn(p, n) for n in range(3, 23)]
    assert sum(1 for x in later if x.destination == A) == 0
    assert all(A not in x.fallbacks for x in later)  # nor is it anyone's fallback
    # the ejection ends: the next request is the probe, and nothing else goes to A meanwhile
    clock.t += SETTINGS.base_ejection_s + 0.1
    probe = turn(p, 23)
    assert probe.destination == A
    assert [turn(p, n).destination for n in range(24, 30)].count(A) == 0
    p.on_response(probe, 200)
    assert turn(p, 30).destination == A  # readmitted: the session is back where its prefix is


def test_the_guard_off_keeps_the_failing_engine() -> None:
    p, index, _ = picker(OutlierSettings(consecutive_errors=0, base_ejection_s=10.0, max_ejection_s=300.0))
    index.hits = {A: 3900}
    for n in range(10):
        p.on_response(turn(p, n), 503)
    assert turn(p, 10).destination == A


def test_a_retried_attempt_counts_against_the_entries_before_the_one_that_answered() -> None:
    p, index, _ = picker()
    index.hits = {A: 3900}
    o = p.outliers
    assert o is not None
    pick = turn(p, 0)
    assert pick.destination == A and len(pick.fallbacks) >= 2
    f1, f2 = pick.fallbacks[:2]
    # attempt 3 answered 200: A and the first fallback failed, the second answered
    assert p.on_response(pick, 200, attempts=3) == ()
    assert o._errors == {A: 1, f1: 1}
    # the gateway reports the served endpoint instead (GIE metadata): the same
    p.on_response(pick, 200, served=f2)
    assert o._errors == {A: 2, f1: 2}
    assert p.on_response(pick, 503, attempts=1) == (A,)
    assert o.excluded(A)
    # a request the gateway sent past the picker's list: only the list's entries count
    d = "10.0.0.4:8000"
    p.on_response(Pick(d, (), "r", "p", "", d, 0, 0, 0.0), 503, attempts=3)
    assert o._errors.get(d) == 1
    assert p.on_response(pick, 0) == ()  # no status (the stream went away): nothing counted


def test_every_endpoint_ejected_routes_over_all_of_them() -> None:
    p, _, _ = picker(OutlierSettings(consecutive_errors=1, base_ejection_s=10.0, max_ejection_s=300.0))
    for a in EPS:
        p.on_response(Pick(a, (), "r", "p", "", a, 0, 0, 0.0), 500)
    assert turn(p, 0).destination in EPS  # the framework's all-stale fallback, not a 503


def test_the_picker_forgets_a_removed_endpoint() -> None:
    p, _, _ = picker(OutlierSettings(consecutive_errors=1, base_ejection_s=10.0, max_ejection_s=300.0))
    p.on_response(Pick(A, (), "r", "p", "", A, 0, 0, 0.0), 500)
    assert p.outliers is not None and p.outliers.excluded(A)
    p.on_endpoint_removed(A)
    assert not p.outliers.excluded(A)


# -- through the ext_proc servicer ------------------------------------------------------------------


def _status(code: int, extra: dict[str, str]) -> ep.ProcessingRequest:
    hm = base_pb2.HeaderMap(
        headers=[
            base_pb2.HeaderValue(key=k, raw_value=v.encode())
            for k, v in {":status": str(code), **extra}.items()
        ]
    )
    return ep.ProcessingRequest(response_headers=ep.HttpHeaders(headers=hm, end_of_stream=True))


async def _one(stub: object, code: int, extra: dict[str, str]) -> str:
    call = stub.Process()  # type: ignore[attr-defined]
    await call.write(headers_msg(BASE_HEADERS))
    for m in body_msgs(chat()):
        await call.write(m)
    dest = set_headers(await call.read())["x-smetric-destination-primary"]
    await call.read()
    await call.write(_status(code, extra))
    await call.read()
    await call.done_writing()
    assert await call.read() == grpc.aio.EOF
    return dest


def _with_outliers(servicer: ExtProcServicer, clock: Clock) -> OutlierDetector:
    p = servicer.picker
    p.outliers = OutlierDetector(SETTINGS, clock)
    p._is_stale = p._excluded_or_stale
    return p.outliers


async def test_the_gateways_attempt_count_and_retry_after_reach_the_detector(serve: object) -> None:
    servicer, *_ = build()
    clock = Clock()
    o = _with_outliers(servicer, clock)
    stub = await serve(servicer)  # type: ignore[operator]
    dest = await _one(stub, 200, {"x-envoy-attempt-count": "2"})  # the primary failed, a fallback answered
    assert o._errors.get(dest) == 1
    dest = await _one(stub, 429, {"retry-after": "7"})
    assert o.excluded(dest)  # held for the engine's Retry-After
    clock.t += 7.1
    assert not o.excluded(dest)
    for _ in range(9):
        dest = await _one(stub, 503, {})
        if o.excluded(dest):
            break
    reg = servicer.metrics.registry
    assert reg.get_sample_value("smetric_epp_endpoint_ejections_total", {"endpoint": dest}) == 1


# -- boundaries and bookkeeping (what smetric.bench.mutation.run epp.server.outlier checks) ---------------


def test_the_boundaries_are_exact() -> None:
    o, clock = detector()
    for _ in range(3):
        o.failed(A)
    until = clock.t + SETTINGS.base_ejection_s
    clock.t = until  # the ejection ends at exactly its end time
    assert not o.excluded(A) and o.state(A) == "half-open"
    o.dispatched(A)
    clock.t = until + SETTINGS.base_ejection_s  # the probe's answer is due by then
    assert not o.excluded(A)


def test_an_answer_at_the_end_of_the_ejection_is_the_probes() -> None:
    o, clock = detector()
    for _ in range(3):
        o.failed(A)
    clock.t += SETTINGS.base_ejection_s
    assert o.failed(A)  # half-open (no dispatch seen): an error ejects again, for longer
    clock.t += 2 * SETTINGS.base_ejection_s - 0.1
    assert o.excluded(A)
    o2, clock2 = detector()
    for _ in range(3):
        o2.failed(B)
    clock2.t += SETTINGS.base_ejection_s
    assert o2.succeeded(B) and o2.state(B) == "closed"  # and a success readmits it


def test_return_values_and_the_error_count_storage() -> None:
    o, _ = detector()
    assert not o.succeeded(A)  # nothing to readmit
    for _ in range(3):
        o.failed(A)
    assert o._errors == {}  # the count goes once it ejected
    o2, _ = detector()
    o2.failed(A)
    o2.failed(A)
    o2.forget(A)
    assert not o2.failed(A) and not o2.excluded(A)  # forget dropped the count


def test_relapse_lengths_follow_the_readmission_time() -> None:
    s = OutlierSettings(consecutive_errors=1, base_ejection_s=10.0, max_ejection_s=300.0)

    def ejected_for(o: OutlierDetector, clock: Clock) -> float:
        start = clock.t
        assert o.failed(A)
        while o.excluded(A):
            clock.t += 0.5
        return clock.t - start

    o, clock = detector(s)
    assert ejected_for(o, clock) == 10.0
    o.dispatched(A)
    assert o.succeeded(A)
    clock.t += 10.0  # exactly one ejection length after its readmission: still a relapse
    assert ejected_for(o, clock) == 20.0
    o.dispatched(A)
    assert o.succeeded(A)
    clock.t += 15.0  # within 2 x 10 s of the second readmission: a relapse again
    assert ejected_for(o, clock) == 30.0
    o.dispatched(A)
    assert o.succeeded(A)
    clock.t += 30.5  # past 3 x 10 s: from scratch
    assert ejected_for(o, clock) == 10.0
    o.dispatched(A)
    assert o.succeeded(A)
    o.forget(A)  # right after a readmission: a relapse now would be ejected for 20 s
    assert ejected_for(o, clock) == 10.0  # forget dropped the history too


def test_a_retry_after_pause_is_not_an_ejection() -> None:
    o, clock = detector()
    o.failed(A, retry_after_s=1.0)  # a one-second pause is honoured too
    assert o.excluded(A)
    clock.t += 1.0
    o.dispatched(A)
    assert o.succeeded(A)
    for _ in range(3):
        o.failed(A)
    clock.t += SETTINGS.base_ejection_s - 0.1  # a first ejection: the base length
    assert o.excluded(A)
    clock.t += 0.1
    assert not o.excluded(A)


def test_retry_after_extends_an_ejection_about_to_end() -> None:
    o, clock = detector()
    for _ in range(3):
        o.failed(A)
    clock.t += SETTINGS.base_ejection_s - 0.5
    assert not o.failed(A, retry_after_s=1.0)
    clock.t += 0.9
    assert o.excluded(A)


def test_settings_bounds_and_shape() -> None:
    import smetric.epp.server.outlier as outlier

    assert set(outlier.__all__) == {"OutlierDetector", "OutlierSettings", "is_error_status"}
    OutlierSettings(consecutive_errors=1, base_ejection_s=5.0, max_ejection_s=5.0)  # equal is fine
    OutlierSettings(consecutive_errors=1, base_ejection_s=0.5, max_ejection_s=5.0)
    with pytest.raises(ValueError):
        OutlierSettings(consecutive_errors=1, base_ejection_s=0.0, max_ejection_s=5.0)
    with pytest.raises(dataclasses.FrozenInstanceError):
        SETTINGS.consecutive_errors = 5  # type: ignore[misc]
    assert not hasattr(SETTINGS, "__dict__")


def test_a_returning_engine_is_not_kept_out_by_the_speed_it_learned_before() -> None:
    """An ejection drops the endpoint's learned prefill speed: it returns at the pool's prior. Fails
    without that (the chaos row "engine answering 503 ... and its recovery"): A learned a low speed
    on a cold start, B and C their true one from the traffic A missed, and the new sessions after
    A's ejection ends all go to B and C -- no probe, so A is never readmitted nor re-learned."""
    p, index, clock = picker()
    for a, speed in ((A, 1.0), (B, 4.0), (C, 4.0)):
        for _ in range(8):
            p.rates.observe(a, cost_s=speed, ttft_s=1.0)
    index.hits = {A: 3900}  # sessions whose prefix A holds: their turns go to A and fail
    for n in range(3):
        p.on_response(turn(p, n), 503)
    index.hits = {}
    assert p.outliers is not None and p.outliers.state(A) == "ejected"
    clock.t += SETTINGS.base_ejection_s + 0.1
    new = [p.pick(RequestView(f"n{k}", prompt_tokens=4000, turn=0), "y" * 16000) for k in range(4)]
    assert A in [x.destination for x in new]  # the probe
    assert p.rates.speed(A) == p.rates.prior() == 4.0
