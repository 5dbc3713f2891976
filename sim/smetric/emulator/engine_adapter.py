"""Thin adapter over :class:`smetric.engine.Instance` for a wall-clock driver.

The engine's public API (``submit`` / ``next_event_s`` / ``advance``) is what the cluster
simulator uses and what the driver uses for all timing. Two things a live server needs are not
in it (gaps reported to the engine's owner), so they are added here, reading the engine's
request records without changing its scheduling:

* :meth:`AbortableInstance.abort` -- a client went away: drop the request from whichever queue
  holds it and release its KV (pinned prefix and reserved blocks), as vLLM's ``abort_request``
  frees the request's blocks. The step in flight keeps its modelled duration.
* :meth:`AbortableInstance.decoded_tokens` -- tokens each decoding request has produced by a given
  engine time. The engine fast-forwards decode stretches (it reports first token and finish
  only); inside a stretch the steps have the stretch's mean duration, so the count is
  ``decoded + floor((t - start) / step)``.
"""

from __future__ import annotations

import heapq
import math

from smetric.engine import Instance
from smetric.engine.scheduler import _DECODE, _DONE, _STRETCH, _Req


class AbortableInstance(Instance):
    """An engine instance that can drop a request and report per-request decode progress."""

    def abort(self, request_id: str) -> bool:
        """Remove a request in any phase and release its KV; False if it is not in the engine."""
        for queue in (self._waiting, self._prefill, self._decode):
            for r in queue:
                if r.spec.request_id == request_id:
                    queue.remove(r)
                    self._release(r)
                    return True
        for i, (_, _, r) in enumerate(self._loading):
            if r.spec.request_id == request_id:
                self._loading.pop(i)
                heapq.heapify(self._loading)
                self._release(r)
                return True
        return False

    def _release(self, req: _Req) -> None:
        self._seg_decodes = [d for d in self._seg_decodes if d is not req]
        self._seg_chunks = [(c, n) for c, n in self._seg_chunks if c is not req]
        self.cache.unreserve(req.reserved)
        req.reserved = 0
        if req.pinned:
            self.cache.unpin(req.pinned)
            req.pinned = []
        req.phase = _DONE

    def decoded_tokens(self, now_s: float) -> dict[str, int]:
        """Tokens produced so far (first token included) by every decoding request at ``now_s``."""
        extra = 0
        if self._kind == _STRETCH and self._seg_dt > 0:
            extra = max(0, min(self._seg_steps, math.floor((now_s - self._seg_start) / self._seg_dt + 1e-9)))
        in_seg = {id(r) for r in self._seg_decodes}
        out: dict[str, int] = {}
        for r in self._decode:
            if r.phase == _DECODE:
                n = r.decoded + (extra if id(r) in in_seg else 0)
                out[r.spec.request_id] = min(n, r.spec.output_tokens)
        return out
