"""The body budget is shared fairly (server/guard.py BodyBudget): clients holding maximal uploads
cannot leave normal requests without room, and one connection holds at most one maximal body.

Through the servicer's stream handler with the ``connection.id`` attribute Envoy sends
(``request_attributes`` in the bundled bootstrap); the end-to-end row is the chaos fault
``body_hogs`` (docs/chaos.md)."""

from __future__ import annotations

from collections.abc import AsyncIterator, Iterable

import pytest
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from google.protobuf import struct_pb2

from smetric.epp.server import messages as msgs
from smetric.epp.server.guard import LARGE_BODY_BYTES, BodyBudget
from smetric.epp.server.servicer import ServicerSettings
from tests.support.epp_harness import BASE_HEADERS, body_msgs, build, chat, headers_msg

MIB = 1 << 20
BUDGET = 64 * MIB
MAX_BODY = 16 * MIB
CHUNK = 64 * 1024


def _attacker_takes(b: BodyBudget, client: str, size: int = MAX_BODY - 1) -> int:
    """Upload ``size`` bytes in 64 KiB chunks as the servicer would; the bytes held at the end
    (0 when refused: the servicer drops the body and gives its reservation back)."""
    held = 0
    while held < size:
        n = min(CHUNK, size - held)
        if not b.take(n, held, client):
            b.give(held, client)
            return 0
        held += n
    return held


def test_four_maximal_uploads_leave_the_small_bodies_their_reserve() -> None:
    b = BodyBudget(BUDGET, client_large_bytes=MAX_BODY)
    held = [_attacker_takes(b, f"10.0.0.{i}:4000") for i in range(4)]
    assert sum(1 for h in held if h) == 3  # 3 x 16 MiB = 48 MiB: the large share
    assert b.large_used_bytes == sum(held) <= b.large_limit_bytes == 48 * MIB
    normal = [400_000] * 40  # forty 400 kB requests at once still fit
    assert all(b.take(n, 0, f"10.1.0.{i}:5000") for i, n in enumerate(normal))
    assert "its budget is" in b.refusal(CHUNK, MAX_BODY - CHUNK, "10.0.0.3:4000")


def test_one_connection_holds_at_most_one_maximal_body() -> None:
    b = BodyBudget(BUDGET, client_large_bytes=MAX_BODY)
    assert _attacker_takes(b, "10.0.0.1:4000")
    assert _attacker_takes(b, "10.0.0.1:4000", 2 * MIB) == 0  # a second large body, same connection
    assert "per connection" in b.refusal(2 * MIB, 0, "10.0.0.1:4000")
    assert _attacker_takes(b, "10.0.0.2:4000", 2 * MIB)  # another connection may
    assert _attacker_takes(b, "", 2 * MIB)  # no address known: the shared caps only


def test_crossing_the_threshold_counts_the_whole_body_and_giving_returns_it() -> None:
    b = BodyBudget(BUDGET, client_large_bytes=MAX_BODY)
    assert b.take(LARGE_BODY_BYTES, 0, "c") and b.large_used_bytes == 0  # at the threshold: small
    assert b.take(1, LARGE_BODY_BYTES, "c") and b.large_used_bytes == LARGE_BODY_BYTES + 1
    assert b.take(10, LARGE_BODY_BYTES + 1, "c") and b.large_used_bytes == LARGE_BODY_BYTES + 11
    b.give(LARGE_BODY_BYTES + 11, "c")
    assert (b.used_bytes, b.large_used_bytes) == (0, 0)
    assert b.refusal(MAX_BODY, 0, "c") == ""


@pytest.mark.parametrize("share", [0.0, 1.5])
def test_the_large_share_is_a_fraction(share: float) -> None:
    with pytest.raises(ValueError, match="large_share"):
        BodyBudget(BUDGET, large_share=share)


def _with_connection(m: ep.ProcessingRequest, connection: int) -> ep.ProcessingRequest:
    s = struct_pb2.Struct()
    s.update({msgs.CONNECTION_ID: connection})
    m.attributes[msgs.ATTRIBUTES_NAMESPACE].CopyFrom(s)
    return m


async def _messages(items: Iterable[ep.ProcessingRequest]) -> AsyncIterator[ep.ProcessingRequest]:
    for m in items:
        yield m


async def test_the_servicer_reads_the_connection_from_envoys_attributes() -> None:
    settings = ServicerSettings(max_body_bytes=MAX_BODY, body_budget_bytes=BUDGET)
    servicer, *_ = build(settings=settings)
    servicer.budget.take(MAX_BODY - 1, 0, "conn:7")  # the connection holds one maximal body
    head = _with_connection(headers_msg(BASE_HEADERS), 7)
    body = chat(text="y" * (2 * MIB))
    out = [r async for r in servicer.Process(_messages([head, *body_msgs(body, 4)]), None)]
    assert out[-1].immediate_response.status.code == 503
    assert b"per connection" in out[-1].immediate_response.body
    other = _with_connection(headers_msg(BASE_HEADERS), 8)
    out = [r async for r in servicer.Process(_messages([other, *body_msgs(body, 4)]), None)]
    assert not out[0].HasField("immediate_response")  # routed
    assert servicer.budget.used_bytes == MAX_BODY - 1  # its bytes given back once routed
