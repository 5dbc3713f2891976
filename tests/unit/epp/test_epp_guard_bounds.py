"""The request path's guards, each bound asserted at its boundary (docs/mutation.md).

The hostile-header test names the routing headers itself: a header dropped from the scrub list
must fail here instead of silently dropping its own check.
"""

from __future__ import annotations

import pytest

from smetric.epp.parse.errors import RequestError
from smetric.epp.server.guard import (
    INFERENCE_PATHS,
    PICKER_ID_HEADER,
    SHED_RETRY_AFTER_S,
    TRUSTED_HEADERS,
    Admission,
    BodyBudget,
    Shed,
    path_allowed,
    prefills,
)
from tests.support.epp_harness import BASE_HEADERS, EPS, body_msgs, build, chat, exchange, headers_msg

# Written out, not read from the module: the headers a client must never set.
ROUTING_HEADERS = (
    "x-gateway-destination-endpoint",
    "x-gateway-destination-endpoint-served",
    "x-gateway-destination-endpoint-subset",
    "x-smetric-destination-primary",
    "x-prefiller-host-port",
    "x-envoy-original-dst-host",
    "x-smetric-request-id",
)


def test_the_trusted_header_list_names_every_routing_header() -> None:
    assert set(ROUTING_HEADERS) <= set(TRUSTED_HEADERS)
    assert PICKER_ID_HEADER == "x-smetric-request-id"


async def test_client_copies_of_each_routing_header_are_removed_or_overwritten(serve: object) -> None:
    servicer, *_ = build()
    stub = await serve(servicer)  # type: ignore[operator]
    hostile = {h: "127.0.0.1:9901" for h in ROUTING_HEADERS}
    out = await exchange(stub, [headers_msg({**BASE_HEADERS, **hostile}), *body_msgs(chat())])
    mutation = out[0].request_headers.response.header_mutation
    removed = set(mutation.remove_headers)
    set_ = {h.header.key: h.header.raw_value.decode() for h in mutation.set_headers}
    # the picker overwrites the destination, its primary and its own id ...
    assert set(set_["x-gateway-destination-endpoint"].split(",")) <= set(EPS)
    assert set_["x-smetric-destination-primary"] in EPS
    assert set_["x-smetric-request-id"] not in ("", "127.0.0.1:9901")
    # ... and removes the copies of the headers it does not set
    for h in (
        "x-gateway-destination-endpoint-served",
        "x-gateway-destination-endpoint-subset",
        "x-prefiller-host-port",
    ):
        assert h in removed and h not in set_, h
    # x-envoy-* cannot be mutated from ext_proc (the gateway's scrub filter removes it)
    assert "x-envoy-original-dst-host" not in removed | set(set_)


def test_inference_paths() -> None:
    # written out: dropping one from the allow-list fails here (adding one does not)
    for p in (
        "/v1/chat/completions",
        "/v1/completions",
        "/v1/responses",
        "/v1/messages",
        "/v1/messages/count_tokens",
        "/v1/embeddings",
        "/v1/models",
    ):
        assert p in INFERENCE_PATHS
        assert path_allowed(p) and path_allowed(p + "/") and path_allowed(p + "?stream=true")
        assert path_allowed(p + "/?a=b?c")
    for p in ("/metrics", "/v1/chat/completionsX", "/v1/models//", "", "/", "/v1", "v1/models"):
        assert not path_allowed(p), p


def test_only_a_token_count_skips_the_prefill() -> None:
    for p in (
        "/v1/messages/count_tokens",
        "/v1/messages/count_tokens/",
        "/v1/messages/count_tokens?beta=true",
    ):
        assert not prefills(p), p
    for p in ("/v1/messages", "/v1/chat/completions", "/v1/messages/count_tokensX"):
        assert prefills(p), p


def test_an_empty_allow_list_allows_everything() -> None:
    assert path_allowed("/metrics", ())
    assert path_allowed("", ())


def test_the_root_path_keeps_its_slash() -> None:
    assert path_allowed("/", ("/",))
    assert path_allowed("//", ("/",))  # one trailing slash tolerated
    assert not path_allowed("/", ("",))


def test_body_budget_boundary_and_underflow() -> None:
    b = BodyBudget(100)
    assert (b.limit_bytes, b.used_bytes) == (100, 0)
    assert b.take(60) and b.used_bytes == 60
    assert b.take(40) and b.used_bytes == 100  # exactly the limit is allowed
    assert not b.take(1) and b.used_bytes == 100  # a refused take reserves nothing
    assert b.take(0)
    b.give(30)
    assert b.used_bytes == 70
    assert not b.take(31) and b.take(30) and b.used_bytes == 100
    b.give(500)  # more than was taken: clamps at zero, never negative
    assert b.used_bytes == 0
    assert b.take(100) and b.used_bytes == 100
    assert BodyBudget(1).take(1)


@pytest.mark.parametrize("limit", [0, -1])
def test_body_budget_needs_a_positive_limit(limit: int) -> None:
    with pytest.raises(ValueError, match=r"^limit_bytes must be positive$"):
        BodyBudget(limit)


def test_admission_inflight_bound() -> None:
    a = Admission(max_inflight=2, budget_s=1.5)
    assert (a.max_inflight, a.budget_s, a.inflight) == (2, 1.5, 0)
    a.enter()
    a.enter()
    assert a.inflight == 2
    with pytest.raises(Shed) as err:
        a.enter()
    shed = err.value
    assert isinstance(shed, RequestError)
    assert (shed.status, shed.reason, a.inflight) == (503, "inflight", 2)
    assert shed.message == (
        "the endpoint picker is overloaded: 2 requests are waiting for a routing decision (limit 2); "
        "retry after 1 s"
    )
    a.leave()
    assert a.inflight == 1
    a.enter()
    a.leave()
    a.leave()
    a.leave()  # one leave too many never goes negative
    assert a.inflight == 0
    a.enter()
    assert a.inflight == 1
    assert SHED_RETRY_AFTER_S == 1


def test_admission_deadline_boundary() -> None:
    a = Admission(max_inflight=1, budget_s=2.0)
    a.check(10.0, 12.0)  # exactly the budget: still in time
    a.check(10.0, 10.5)
    with pytest.raises(Shed) as err:
        a.check(10.0, 12.25)
    assert (err.value.status, err.value.reason) == (503, "deadline")
    assert err.value.message == (
        "the endpoint picker could not route the request within its decision budget of 2 s "
        "(waited 2.25 s since the request headers arrived): it is overloaded or the request body "
        "is arriving too slowly; retry after 1 s"
    )
    assert a.late(0.5).message.startswith("the endpoint picker could not route the request within")
    assert "(waited 0.50 s" in a.late(0.5).message


@pytest.mark.parametrize("inflight, budget_s", [(0, 1.0), (-1, 1.0), (1, 0.0), (1, -1.0), (1, float("nan"))])
def test_admission_refuses_non_positive_bounds(inflight: int, budget_s: float) -> None:
    with pytest.raises(ValueError) as err:
        Admission(inflight, budget_s)
    assert str(err.value) == (
        "admission control needs a positive --max-inflight-decisions and --decision-budget-ms, "
        f"got {inflight} and {budget_s * 1000:g} ms"
    )


def test_admission_accepts_the_smallest_bounds() -> None:
    a = Admission(1, 0.001)
    a.enter()
    with pytest.raises(Shed):
        a.enter()


# ---- the body budget's large-body share (survivors of the full mutation run) ----------------------


def test_large_share_and_threshold_bounds() -> None:
    from smetric.epp.server.guard import BodyBudget

    assert BodyBudget(100, large_share=1.0).large_limit_bytes == 100  # the whole budget is allowed
    assert BodyBudget(100, large_bytes=1).large_bytes == 1
    for bad in ({"large_share": 0.0}, {"large_share": 1.01}, {"large_bytes": 0}):
        with pytest.raises(ValueError, match=r"^large_share must be in \(0, 1\] and large_bytes positive$"):
            BodyBudget(100, **bad)  # type: ignore[arg-type]


def test_take_and_refusal_defaults_hold_nothing_and_name_no_client() -> None:
    from smetric.epp.server.guard import BodyBudget

    # a 10-byte body at a 10-byte threshold is not large: nothing counts against a 5-byte share
    small_share = BodyBudget(1000, large_bytes=10, large_share=0.005)
    assert small_share.refusal(10) == "" and small_share.take(10) and small_share.large_used_bytes == 0
    # without a client no per-connection bound applies (40 + 40 > 50 would pass it)
    b = BodyBudget(1000, large_bytes=10, large_share=1.0, client_large_bytes=50)
    assert b.take(40) and b.take(40) and b.large_used_bytes == 80


def test_the_large_share_admits_up_to_its_limit_and_give_returns_exactly() -> None:
    from smetric.epp.server.guard import BodyBudget

    b = BodyBudget(100, large_bytes=10, large_share=0.5)  # large share 50 bytes
    assert b.take(20, 0, "a") and b.take(30, 0, "b")  # 50: exactly the limit
    assert not b.take(11, 0, "c")
    b.give(20, "a")
    assert b.large_used_bytes == 30 and b.used_bytes == 30
    b.give(30, "b")
    assert b.large_used_bytes == 0 and b._by_client == {}  # no empty per-connection entries left
