"""Responses follow-ups (smetric.epp.server.affinity): the bounded response id -> endpoint map, the
id read from a response's first bytes, previous_response_id parsed from the request, the picker
pinning a follow-up to the engine holding its previous response (and falling back to the policy
when that engine is gone, stale or outside the subset), and the map in the snapshot."""

from __future__ import annotations

import asyncio
import time
from typing import Any

import orjson
import pytest
from prometheus_client import CollectorRegistry

from smetric.core.views import RequestView
from smetric.epp.obs.metrics import PickerMetrics
from smetric.epp.parse.body import MAX_RESPONSE_ID_CHARS, parse_body
from smetric.epp.server.affinity import (
    ENTRY_OVERHEAD_BYTES,
    HEAD_BYTES,
    ResponseAffinity,
    response_id_in,
)
from smetric.epp.server.decide import PINNED_REASON, Picker
from smetric.epp.server.snapshot import dump, load
from smetric.epp.server.static import StaticEndpointSource, idle_metrics
from smetric.policy import PolicyParams
from smetric.policy.framework import Router
from smetric.policy.registry import make_policy
from tests.support.epp_harness import BASE_HEADERS, FakeIndex, body_msgs, exchange, headers_msg, set_headers

EPS = ("10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000")
RID = "resp_0123456789abcdef0123456789abcdef"


# -- the map --------------------------------------------------------------------------------------


def test_remember_and_lookup() -> None:
    m = ResponseAffinity()
    assert m.lookup(RID) is None
    assert m.remember(RID, EPS[1])
    assert m.lookup(RID) == EPS[1]
    assert m.remember(RID, EPS[2])  # the same id again: the newer endpoint, one entry
    assert len(m) == 1 and m.lookup(RID) == EPS[2]


def test_the_entry_budget_evicts_the_least_recently_used() -> None:
    m = ResponseAffinity(max_entries=3)
    for i in range(3):
        m.remember(f"resp_{i}", EPS[0])
    m.lookup("resp_0")  # used: now the most recent
    m.remember("resp_3", EPS[1])
    assert len(m) == 3 and m.evicted == 1
    assert m.lookup("resp_1") is None and m.lookup("resp_0") == EPS[0]


def test_the_byte_budget_bounds_the_map() -> None:
    one = len(RID) + len(EPS[0]) + ENTRY_OVERHEAD_BYTES
    m = ResponseAffinity(max_entries=1_000_000, max_bytes=10 * one)
    for i in range(1000):
        m.remember(f"resp_{i:032x}", EPS[0])
    assert len(m) == 10 and m.bytes <= 10 * one
    assert m.lookup(f"resp_{999:032x}") == EPS[0] and m.lookup(f"resp_{0:032x}") is None


@pytest.mark.parametrize(
    ("rid", "address"),
    [
        ("chatcmpl-1", EPS[0]),  # not a Responses id
        ("resp_" + "a" * 129, EPS[0]),  # too long
        ("resp_a b", EPS[0]),  # outside the id alphabet
        (RID, "x" * 65),  # not an address
        (RID, "10.0.0.1:8000,10.0.0.2:8000"),  # a list is not one address
    ],
)
def test_malformed_entries_are_refused(rid: str, address: str) -> None:
    m = ResponseAffinity()
    assert not m.remember(rid, address)
    assert len(m) == 0 and m.bytes == 0


def test_forget_endpoint_and_state_round_trip() -> None:
    m = ResponseAffinity()
    for i, ep in enumerate((*EPS, EPS[0])):
        m.remember(f"resp_{i}", ep)
    assert m.forget_endpoint(EPS[0]) == 2
    state = m.export_state()
    assert list(state) == ["resp_1", "resp_2"]  # least recent first
    other = ResponseAffinity()
    assert other.import_state({**state, "bad id": EPS[0], "resp_9": 7}) == 2
    assert other.export_state() == state and other.bytes == m.bytes


def test_bad_budgets_are_a_clear_error() -> None:
    with pytest.raises(ValueError):
        ResponseAffinity(max_entries=0)
    with pytest.raises(ValueError):
        ResponseAffinity(max_bytes=1)


# -- the id in a response ---------------------------------------------------------------------------


def test_the_id_of_a_json_body_and_of_a_stream() -> None:
    body = orjson.dumps({"id": RID, "object": "response", "output": [{"id": "msg_1"}]})
    assert response_id_in(body) == RID
    created = {"type": "response.created", "response": {"id": RID, "status": "in_progress"}}
    stream = b"event: response.created\ndata: " + orjson.dumps(created) + b"\n\n"
    assert response_id_in(stream) == RID
    assert response_id_in(b'{"id": "chatcmpl-1"}') == ""
    assert response_id_in(b" " * HEAD_BYTES + orjson.dumps({"id": RID})) == ""  # past the head


# -- the request ------------------------------------------------------------------------------------


def test_previous_response_id_is_parsed_from_responses_bodies_only() -> None:
    def parsed(doc: dict[str, object], path: str = "/v1/responses") -> str:
        return parse_body(orjson.dumps({"model": "m", **doc}), path).previous_response_id

    assert parsed({"input": "go on", "previous_response_id": RID}) == RID
    assert parsed({"input": "go on"}) == ""
    assert parsed({"input": "go on", "previous_response_id": 7}) == ""  # not a string: ignored
    assert parsed({"input": "x", "previous_response_id": "r" * (MAX_RESPONSE_ID_CHARS + 1)}) == ""
    chat: dict[str, object] = {"messages": [{"role": "user", "content": "x"}], "previous_response_id": RID}
    assert parsed(chat, "/v1/chat/completions") == ""


# -- the picker -------------------------------------------------------------------------------------


def _picker(responses: ResponseAffinity | None) -> tuple[Picker, StaticEndpointSource, FakeIndex]:
    source, index, params = StaticEndpointSource(EPS), FakeIndex(), PolicyParams()
    picker = Picker(
        source, index, Router(make_policy("smetric", params)), params.cost_model, responses=responses
    )
    return picker, source, index


def _view(rid: str) -> RequestView:
    return RequestView(request_id=rid, prompt_tokens=1000, turn=1, est_hit_tokens=0)


def test_a_follow_up_goes_to_the_engine_holding_its_previous_response() -> None:
    picker, _, index = _picker(ResponseAffinity())
    index.hits = {EPS[0]: 1000}  # the policy would take EPS[0]
    picker.on_response_id(RID, EPS[2])
    pick = picker.pick(_view("r1"), "x" * 4000, (), None, previous_response_id=RID)
    assert pick.destination == EPS[2] and pick.reason == PINNED_REASON
    assert pick.fallbacks[0] == EPS[0]  # the policy's choice comes next
    assert pick.ledger_address == EPS[2]  # the work is charged where it runs
    other = picker.pick(_view("r2"), "x" * 4000, (), None, previous_response_id="resp_unknown")
    assert other.destination == EPS[0] and other.reason != PINNED_REASON


def test_without_the_map_the_policy_decides() -> None:
    """The guard off: the same follow-up lands where the policy puts it."""
    picker, _, index = _picker(None)
    index.hits = {EPS[0]: 1000}
    picker.on_response_id(RID, EPS[2])
    assert picker.pick(_view("r1"), "x" * 4000, (), None, previous_response_id=RID).destination == EPS[0]


def test_a_gone_stale_or_excluded_holder_falls_back_to_the_policy() -> None:
    picker, source, index = _picker(ResponseAffinity())
    index.hits = {EPS[0]: 1000}
    picker.on_response_id(RID, EPS[2])
    subset = frozenset({"10.0.0.1", "10.0.0.2"})
    assert picker.pick(_view("a"), "x" * 4000, (), subset, previous_response_id=RID).destination == EPS[0]
    source.set_metrics(EPS[2], idle_metrics(time.monotonic() - 60))  # its scrapes stopped: stale
    assert picker.pick(_view("b"), "x" * 4000, (), None, previous_response_id=RID).destination == EPS[0]
    source.set_metrics(EPS[2], idle_metrics())
    assert picker.pick(_view("c"), "x" * 4000, (), None, previous_response_id=RID).destination == EPS[2]
    picker.on_endpoint_removed(EPS[2])  # discovery dropped it: its responses are gone with it
    assert picker.responses is not None and picker.responses.lookup(RID) is None


# -- the snapshot -----------------------------------------------------------------------------------


class _Index:
    tokens_per_key = 16

    def __init__(self) -> None:
        self.state: dict[str, list[int]] = {}

    def export_state(self) -> dict[str, list[int]]:
        return self.state

    def import_state(self, state: dict[str, list[int]]) -> None:
        self.state = state


def test_the_map_survives_a_restart_through_the_snapshot() -> None:
    before = ResponseAffinity()
    before.remember(RID, EPS[1])
    before.remember("resp_2", EPS[0])
    data = dump(_Index(), before)
    after = ResponseAffinity()
    assert load(_Index(), data, "test", after)
    assert after.export_state() == before.export_state()
    older = orjson.loads(data)
    del older["responses"]  # a snapshot written without the map still loads
    assert load(_Index(), orjson.dumps(older), "test", ResponseAffinity())


async def test_a_replica_pushes_what_it_learns_to_its_peers() -> None:
    """StateKeeper: a response id learned by one picker reaches its peer's map within the push
    interval; the peer's /responses refuses oversize and malformed bodies."""
    import asyncio

    import aiohttp

    from smetric.epp.envoy import free_port
    from smetric.epp.server.snapshot import MAX_PUSH_BYTES, PUSH_INTERVAL_S, StateKeeper

    port = free_port()
    receiver = StateKeeper(_Index(), serve_port=port, responses=ResponseAffinity())
    sender_map = ResponseAffinity()
    sender = StateKeeper(_Index(), peers=(f"127.0.0.1:{port}",), responses=sender_map)
    await receiver.start()
    await sender.start()
    try:
        sender_map.remember(RID, EPS[1])
        assert receiver.responses is not None
        for _ in range(100):
            if receiver.responses.lookup(RID) is not None:
                break
            await asyncio.sleep(PUSH_INTERVAL_S)
        assert receiver.responses.lookup(RID) == EPS[1]
        async with aiohttp.ClientSession() as http:
            url = f"http://127.0.0.1:{port}/responses"
            async with http.post(url, data=b"[1]") as r:
                assert r.status == 400
            async with http.post(url, data=b"{" + b" " * MAX_PUSH_BYTES + b"}") as r:
                assert r.status == 413
            async with http.post(url, data=orjson.dumps({"resp_x": "10.9.9.9:1", "bad": 1})) as r:
                assert r.status == 200 and (await r.json())["taken"] == 1
    finally:
        await sender.stop()
        await receiver.stop()


def test_the_outbox_is_bounded() -> None:
    from smetric.epp.server.snapshot import MAX_OUTBOX, StateKeeper

    keeper = StateKeeper(_Index(), peers=("127.0.0.1:1",), responses=ResponseAffinity())
    for i in range(MAX_OUTBOX + 5):
        keeper.learned(f"resp_{i}", EPS[0])
    assert len(keeper._outbox) == MAX_OUTBOX and keeper.push_dropped == 5


async def test_a_peer_name_fans_out_to_every_address() -> None:
    from smetric.epp.server.snapshot import _addresses

    assert "127.0.0.1:9004" in await _addresses("localhost:9004")
    assert await _addresses("no-such-host.invalid:9004") == ["no-such-host.invalid:9004"]


# -- a follow-up that beat the push: the peers are asked ---------------------------------------------


def _servicer(responses: ResponseAffinity) -> tuple[Any, FakeIndex, PickerMetrics]:
    from smetric.epp.server.servicer import ExtProcServicer, ServicerSettings

    source, index, params = StaticEndpointSource(EPS), FakeIndex(), PolicyParams()
    picker = Picker(
        source, index, Router(make_policy("smetric", params)), params.cost_model, responses=responses
    )
    metrics = PickerMetrics(CollectorRegistry())
    return ExtProcServicer(picker, metrics, ServicerSettings()), index, metrics


async def _follow_up(serve: Any, servicer: Any) -> str:
    stub = await serve(servicer)
    body = orjson.dumps({"model": "m", "input": "go on", "previous_response_id": RID})
    out = await exchange(stub, [headers_msg({**BASE_HEADERS, ":path": "/v1/responses"}), *body_msgs(body)])
    return set_headers(out[0])["x-smetric-destination-primary"]


def _asks(metrics: PickerMetrics, outcome: str) -> float:
    return (
        metrics.registry.get_sample_value("smetric_epp_response_peer_asks_total", {"outcome": outcome}) or 0
    )


@pytest.mark.parametrize("peers", [True, False], ids=["peers", "no-peers"])
async def test_a_follow_up_unknown_here_is_placed_by_the_peer_that_saw_its_response(
    serve: Any, peers: bool
) -> None:
    """The follow-up reaches this replica before the other's push: with a peer lookup it still
    goes to the engine holding its previous response; without (the guard off) the policy decides."""
    responses = ResponseAffinity()
    servicer, index, metrics = _servicer(responses)
    index.hits = {EPS[0]: 100_000}  # the policy would take EPS[0]
    asked: list[str] = []

    async def lookup(rid: str) -> str | None:
        asked.append(rid)
        await asyncio.sleep(0.01)
        responses.remember(rid, EPS[2], notify=False)  # as StateKeeper.ask_peers does
        return EPS[2]

    if peers:
        servicer.peer_lookup = lookup
    assert await _follow_up(serve, servicer) == (EPS[2] if peers else EPS[0])
    assert asked == ([RID] if peers else [])
    assert _asks(metrics, "found") == (1 if peers else 0)
    if peers:  # known now: the next follow-up does not ask again
        assert await _follow_up(serve, servicer) == EPS[2] and asked == [RID]


async def test_a_peer_that_does_not_answer_delays_a_follow_up_by_a_bounded_time(serve: Any) -> None:
    from smetric.epp.server.affinity import PEER_ASK_TIMEOUT_S

    servicer, index, metrics = _servicer(ResponseAffinity())
    index.hits = {EPS[0]: 100_000}

    async def hangs(rid: str) -> str | None:
        await asyncio.sleep(3600)
        return None

    servicer.peer_lookup = hangs
    t0 = time.monotonic()
    assert await _follow_up(serve, servicer) == EPS[0]  # the policy's choice, after the bound
    assert time.monotonic() - t0 < PEER_ASK_TIMEOUT_S + 5.0
    assert _asks(metrics, "unknown") == 1


async def test_a_replica_answers_where_a_response_lives() -> None:
    """StateKeeper.ask_peers over real HTTP: the first peer that knows wins (a dead peer and one
    that does not know are no obstacle); an id no peer knows, or a malformed one, is None."""
    from smetric.epp.envoy import free_port
    from smetric.epp.server.snapshot import StateKeeper

    knows, blank = free_port(), free_port()
    holder = StateKeeper(_Index(), serve_port=knows, responses=ResponseAffinity())
    other = StateKeeper(_Index(), serve_port=blank, responses=ResponseAffinity())
    assert holder.responses is not None
    holder.responses.remember(RID, EPS[1])
    mine = ResponseAffinity()
    asker = StateKeeper(
        _Index(), peers=("127.0.0.1:1", f"127.0.0.1:{blank}", f"127.0.0.1:{knows}"), responses=mine
    )
    await holder.start()
    await other.start()
    try:
        assert await asker.ask_peers(RID) == EPS[1]
        assert mine.lookup(RID) == EPS[1]  # remembered here
        assert await asker.ask_peers("resp_nobody_knows") is None
        assert await asker.ask_peers("../snapshot") is None
    finally:
        await asker.stop()
        await holder.stop()
        await other.stop()
