"""``POST /v1/messages/count_tokens`` (Claude Code counts a turn's tokens before it sends it) passes
the gateway and is routed by load alone: no prefill charged to the ledger, no session step."""

from __future__ import annotations

import orjson

from smetric.epp.server.guard import INFERENCE_PATHS, path_allowed, prefills
from tests.support.epp_harness import BASE_HEADERS, body_msgs, build, headers_msg, set_headers

BODY = orjson.dumps(
    {
        "model": "m",
        "system": "You are a coding agent. " * 200,
        "messages": [
            {"role": "user", "content": "run the tests " * 300},
            {"role": "assistant", "content": "done"},
            {"role": "user", "content": "next"},
        ],
    }
)


def test_count_tokens_is_an_allowed_path_without_a_prefill() -> None:
    assert "/v1/messages/count_tokens" in INFERENCE_PATHS
    assert path_allowed("/v1/messages/count_tokens?beta=true")
    assert not path_allowed("/v1/messages/batches")
    assert not prefills("/v1/messages/count_tokens") and not prefills("/v1/messages/count_tokens/?x=1")
    assert prefills("/v1/messages") and prefills("/v1/chat/completions")


async def _route(stub: object, path: str, request_id: str) -> tuple[object, str]:
    """The open ext_proc stream (the request is in flight) and where it was routed."""
    call = stub.Process()  # type: ignore[attr-defined]
    await call.write(headers_msg({**BASE_HEADERS, ":path": path, "x-request-id": request_id}))
    for m in body_msgs(BODY):
        await call.write(m)
    head = await call.read()
    await call.read()  # the echoed body
    return call, set_headers(head)["x-smetric-destination-primary"]


async def test_a_token_count_charges_no_prefill_where_the_turn_itself_does(serve: object) -> None:
    servicer, _, _, metrics = build()
    stub = await serve(servicer)  # type: ignore[operator]
    ledger = servicer.picker.ledger
    count, dest = await _route(stub, "/v1/messages/count_tokens", "count")
    assert ledger.queued_cost_s(dest) == 0
    reg = metrics.registry
    assert (
        reg.get_sample_value("smetric_epp_decisions_total", {"policy": "smetric", "reason": "balance"}) == 1
    )
    turn, dest = await _route(stub, "/v1/messages", "turn")
    assert ledger.queued_cost_s(dest) > 0  # the same body as a generation: its prefill is charged
    for call in (count, turn):
        call.cancel()  # type: ignore[attr-defined]
