"""The request path's intake (a mixin of :class:`~smetric.epp.server.servicer.ExtProcServicer`):
admission control and body buffering, before any decision.

An undecided request's next message is awaited within its decision budget (one timer per request,
from its headers); a request whose body is complete is counted by :class:`~smetric.epp.server.guard.
Admission` until it is decided (503 + retry-after past its limit or budget, :class:`~smetric.epp.
server.guard.Shed`). Body chunks are buffered within the per-request limit (413) and the
process-wide :class:`~smetric.epp.server.guard.BodyBudget` (503); a large last chunk is parsed on
the worker pool (:class:`~smetric.epp.server.offload.ParseOffload`), not on the event loop.
"""

from __future__ import annotations

import asyncio
import logging
from collections.abc import AsyncIterator, Callable
from typing import Any, Protocol

from envoy.service.ext_proc.v3 import external_processor_pb2 as ep

from smetric.epp.contracts import PromptKey
from smetric.epp.obs.metrics import PickerMetrics
from smetric.epp.parse.body import ParsedBody
from smetric.epp.parse.errors import RequestError
from smetric.epp.server import messages as msgs
from smetric.epp.server.guard import SHED_RETRY_AFTER_S, Admission, BodyBudget, Shed
from smetric.epp.server.offload import ParseOffload
from smetric.epp.server.stream import StreamState

log = logging.getLogger("smetric.epp")


class IntakeSettings(Protocol):
    @property
    def max_body_bytes(self) -> int: ...
    @property
    def offload_parse_bytes(self) -> int: ...


def _expire(st: StreamState, task: asyncio.Task[Any]) -> None:
    """The decision budget of ``st`` is spent: a wait for its next message ends now."""
    st.deadline = None
    st.expired = True
    if st.waiting:
        task.cancel()


class RequestIntake:
    """Needs the servicer's ``admission``, ``budget``, ``offload``, ``metrics``, ``clock``, the
    settings' ``max_body_bytes`` / ``offload_parse_bytes``, its ``_index_key`` (how a body
    parsed on a worker is keyed) and ``_refused`` (the error counters of a refusal)."""

    admission: Admission
    budget: BodyBudget
    offload: ParseOffload
    metrics: PickerMetrics
    clock: Callable[[], float]
    settings: IntakeSettings

    def _index_key(self, parsed: ParsedBody) -> tuple[str, PromptKey]:
        raise NotImplementedError

    def _refused(self, st: StreamState, status: int) -> None:
        raise NotImplementedError

    async def _within_budget(
        self, st: StreamState, messages: AsyncIterator[ep.ProcessingRequest]
    ) -> ep.ProcessingRequest:
        """The next message of an undecided request (a large last chunk parsed on the worker pool),
        or :class:`Shed` once the decision budget measured from its headers is spent.

        One timer per request (not an ``asyncio.timeout`` per message: ~7 us each, ten messages for
        a 128 KiB body); when it fires while the stream waits here, it cancels the wait."""
        assert st.admitted_at is not None
        if st.deadline is None and not st.expired:
            remaining_s = st.admitted_at + self.admission.budget_s - self.clock()
            if remaining_s <= 0:
                raise self.admission.late(self.clock() - st.admitted_at)
            task = asyncio.current_task()
            assert task is not None
            st.deadline = asyncio.get_running_loop().call_later(remaining_s, _expire, st, task)
        if st.expired:
            raise self.admission.late(self.clock() - st.admitted_at)
        st.waiting = True
        try:
            message = await anext(messages)
            if not st.counted and self._completes_body(st, message):
                self._admit(st)  # Shed (503) when too many complete requests wait for a decision
            if self._large_final_chunk(st, message):  # parse on a worker, not on the loop
                message = await self._preparse(st, message)
        except asyncio.CancelledError:
            task = asyncio.current_task()
            if st.expired and task is not None and task.uncancel() == 0:
                raise self.admission.late(self.clock() - st.admitted_at) from None
            raise
        finally:
            st.waiting = False
        return message

    def _leave(self, st: StreamState) -> None:
        """The request's undecided phase is over (routed, refused or gone)."""
        if st.deadline is not None:
            st.deadline.cancel()
            st.deadline = None
        st.admitted_at = None
        if st.counted:
            st.counted = False
            self.admission.leave()

    def _admit(self, st: StreamState) -> None:
        """Count the request as waiting for a decision: its body is complete. A request still
        uploading is not counted (slow or stalled uploads cannot fill the limit and shed complete
        requests); its time is bounded by the decision budget from its headers and by the
        gateway's request timeouts."""
        self.admission.enter()
        st.counted = True

    @staticmethod
    def _completes_body(st: StreamState, m: ep.ProcessingRequest) -> bool:
        """``m`` ends an undecided request's body (its last chunk, the one BUFFERED message, or
        the trailers)."""
        kind = m.WhichOneof("request")
        if kind == "request_body":
            return m.request_body.end_of_stream or st.req_mode == msgs.MODE_BUFFERED
        return kind == "request_trailers"

    def _shed(self, st: StreamState, exc: Shed) -> ep.ProcessingResponse:
        self._leave(st)
        self.metrics.shed.labels(reason=exc.reason).inc()
        self.metrics.immediate_responses.labels(code="503").inc()
        self._refused(st, 503)
        log.warning("shed request %s: %s", st.request_id, exc.message)
        return msgs.immediate(503, exc.message, retry_after_s=SHED_RETRY_AFTER_S)

    def _large_final_chunk(self, st: StreamState, m: ep.ProcessingRequest) -> bool:
        if m.WhichOneof("request") != "request_body" or st.pick is not None:
            return False
        b = m.request_body
        final = b.end_of_stream or st.req_mode == msgs.MODE_BUFFERED
        return final and len(st.body) + len(b.body) >= self.settings.offload_parse_bytes

    async def _preparse(self, st: StreamState, m: ep.ProcessingRequest) -> ep.ProcessingRequest:
        """Take the last chunk into the body and parse it on the worker pool; the message handed
        on carries no bytes (they are in ``st.body``) and ``_decide`` uses ``st.preparsed``."""
        self._absorb(st, m.request_body.body)
        path = st.headers.path if st.headers is not None else ""
        st.preparsed, st.pretext, st.prekey = await self.offload.parse(st.body, path, self._index_key)
        return ep.ProcessingRequest(request_body=ep.HttpBody(end_of_stream=m.request_body.end_of_stream))

    def _absorb(self, st: StreamState, chunk: bytes) -> None:
        """Buffer one body chunk within the per-request limit (413) and the global budget (503)."""
        n = len(chunk)
        if len(st.body) + n > self.settings.max_body_bytes:
            self._drop_body(st)  # stop buffering
            raise RequestError(413, f"request body exceeds {self.settings.max_body_bytes} bytes")
        if not self.budget.take(n, st.reserved, st.client):
            why = self.budget.refusal(n, st.reserved, st.client)
            self._drop_body(st)
            raise RequestError(
                503, f"the endpoint picker cannot buffer this request body ({why}): retry later"
            )
        st.reserved += n
        st.body += chunk

    def _drop_body(self, st: StreamState) -> None:
        st.body = bytearray()
        if st.reserved:
            self.budget.give(st.reserved, st.client)
            st.reserved = 0
