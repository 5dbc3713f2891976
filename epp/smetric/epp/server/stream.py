"""Per-stream state of one ext_proc stream (one HTTP request through Envoy)."""

from __future__ import annotations

import asyncio
from collections.abc import Callable, Sequence
from typing import Any

from smetric.epp.contracts import PromptKey
from smetric.epp.parse.body import ParsedBody
from smetric.epp.parse.headers import RequestHeaders
from smetric.epp.parse.usage import UsageReader
from smetric.epp.server.decide import Pick
from smetric.epp.server.messages import MODE_FULL_DUPLEX


class StreamState:
    __slots__ = (
        "admitted_at",
        "asked_peers",
        "body",
        "client",
        "completed",
        "counted",
        "deadline",
        "dispatched_at",
        "expired",
        "first_byte_at",
        "generated_id",
        "headers",
        "held_since",
        "ledger_id",
        "observer_attached",
        "observer_timer",
        "parsed",
        "pick",
        "prekey",
        "preparsed",
        "pretext",
        "received_at",
        "req_mode",
        "reserved",
        "resp_bytes",
        "resp_head",
        "resp_mode",
        "resp_sse",
        "resp_status",
        "resume",
        "retried",
        "served",
        "subset",
        "usage",
        "waiting",
    )

    def __init__(self) -> None:
        self.headers: RequestHeaders | None = None
        # flow control: when the request entered the queue, and the decision to re-run from it
        self.held_since: float | None = None
        self.resume: Callable[[], Sequence[Any]] | None = None
        self.admitted_at: float | None = None  # headers arrived, no decision yet (decision budget)
        self.received_at: float | None = None  # request headers arrived (upstream's RequestReceivedTimestamp)
        self.asked_peers = False  # its previous_response_id was looked up at the picker's peers
        self.counted = False  # body complete, counted by admission control until decided
        self.deadline: asyncio.TimerHandle | None = None  # ... the end of its decision budget
        self.expired = False  # ... which has passed
        self.waiting = False  # the stream waits for its next message (the deadline may cancel that)
        self.req_mode: int = MODE_FULL_DUPLEX
        self.resp_mode: int = MODE_FULL_DUPLEX
        self.subset: frozenset[str] | None = None
        self.body = bytearray()
        self.parsed: ParsedBody | None = None
        self.preparsed: ParsedBody | None = None  # parsed on the worker pool (large bodies)
        self.pretext = ""  # ... the prompt text the index saw there
        self.prekey: PromptKey | None = None  # ... and its index key
        self.reserved = 0  # bytes of the global body budget this stream holds
        self.client = ""  # the downstream connection (Envoy's connection.id attribute)
        self.ledger_id = ""  # the picker's own request id (ledger and observer key)
        self.pick: Pick | None = None
        self.dispatched_at = 0.0
        self.first_byte_at: float | None = None
        self.resp_status = 0
        self.resp_bytes = 0  # response body bytes seen
        self.resp_sse = False
        # The first bytes of a 200 Responses answer, until its response id is found (None: not
        # looked for, or done)
        self.resp_head: bytearray | None = None
        self.usage: UsageReader | None = None
        self.completed = False
        self.generated_id = False
        self.served = ""  # x-gateway-destination-endpoint-served, when the gateway reports it
        # the gateway reported an attempt before the one that answered (attempt count > 1, or the
        # served endpoint is not the pick's destination): its TTFT is not the destination's
        self.retried = False
        self.observer_attached = False  # --response-path=observer: an observer stream reports the response
        self.observer_timer: asyncio.TimerHandle | None = None

    @property
    def request_id(self) -> str:
        """The picker's own id (the ledger key); the client's ``x-request-id`` is in ``headers``."""
        return self.ledger_id
