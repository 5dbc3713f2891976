"""Responses follow-ups go to the engine that holds the previous response.

vLLM's Responses API keeps stored responses in the serving engine's memory
(``vllm/entrypoints/openai/responses/serving.py`` ``create_responses``: ``previous_response_id`` is
looked up in that process's ``response_store``; an id it does not hold is a 404 "Response with id
... not found"), so a follow-up that names ``previous_response_id`` and does not resend the
conversation only works on that engine. The picker learns ``response id -> endpoint`` on the
response path (the id is in the first bytes of the response: ``response.created`` of a stream, the
top-level ``id`` of a JSON body) and routes a follow-up there before asking the policy.

:class:`ResponseAffinity` is an LRU map bounded twice: ``max_entries`` and ``max_bytes`` (id +
address characters + a fixed per-entry overhead); the least recently used entries go first. Ids are
accepted only in vLLM's shape (``resp_`` + up to 128 characters of ``[A-Za-z0-9_-]``), addresses
only as ``host:port`` up to 64 characters: an engine's response cannot grow it otherwise.

Trust: the client names a response id, never an endpoint. A follow-up is pinned only to the
endpoint whose response had that id, and only while that endpoint is a ready, fresh member of the
pool (and of the request's subset); otherwise the policy decides as for any request (documented
fallback: the engine is gone, so is the response -- the engine answers 404). Ids are unguessable
(``resp_`` + a random UUID), so knowing one means having received that response.
"""

from __future__ import annotations

import re
from collections import OrderedDict
from collections.abc import Callable, Mapping

ID_PATTERN = re.compile(r"resp_[A-Za-z0-9_-]{1,128}")
ADDRESS_PATTERN = re.compile(r"[A-Za-z0-9.:\[\]_-]{1,64}")
ENTRY_OVERHEAD_BYTES = 120  # an OrderedDict node, two str headers (CPython 3.11, 64-bit), rounded up
# The first "id" of a Responses body: the response's own (``{"id": ...`` of a JSON body, the
# ``response`` object of ``response.created``, the stream's first event).
_RESPONSE_ID = re.compile(rb'"id"\s*:\s*"(resp_[A-Za-z0-9_-]{1,128})"')
HEAD_BYTES = 4096  # response bytes searched for the id; vLLM's response.created is ~1-2 KB
PEER_ASK_TIMEOUT_S = 0.5  # a follow-up waits at most this long for the peer replicas' answer


class AskPeers(Exception):
    """Raised by a decision whose follow-up names a response this replica has not heard of: the
    servicer asks the peer replicas (``--peers``) where it lives, then decides again."""

    def __init__(self, response_id: str) -> None:
        super().__init__(response_id)
        self.response_id = response_id


def response_id_in(head: bytes) -> str:
    """The response id in the first bytes of a Responses answer, or ``""``."""
    m = _RESPONSE_ID.search(head, 0, HEAD_BYTES)
    return m.group(1).decode() if m else ""


def valid_id(response_id: object) -> bool:
    return isinstance(response_id, str) and ID_PATTERN.fullmatch(response_id) is not None


class ResponseAffinity:
    """``response id -> endpoint address``, least recently used first."""

    def __init__(self, max_entries: int = 100_000, max_bytes: int = 32 * 1024 * 1024) -> None:
        if max_entries < 1 or max_bytes < ENTRY_OVERHEAD_BYTES:
            raise ValueError(f"need max_entries >= 1 and max_bytes >= {ENTRY_OVERHEAD_BYTES}")
        self.max_entries = max_entries
        self.max_bytes = max_bytes
        self._map: OrderedDict[str, str] = OrderedDict()
        self._bytes = 0
        self.evicted = 0
        # Told each entry learned from this picker's own responses (the peer push of
        # smetric.epp.server.snapshot.StateKeeper); not entries imported from a snapshot or a peer.
        self.listener: Callable[[str, str], None] | None = None

    def __len__(self) -> int:
        return len(self._map)

    @property
    def bytes(self) -> int:
        return self._bytes

    @staticmethod
    def _cost(response_id: str, address: str) -> int:
        return len(response_id) + len(address) + ENTRY_OVERHEAD_BYTES

    def remember(self, response_id: str, address: str, notify: bool = True) -> bool:
        """Record where ``response_id`` lives; ``False`` (nothing stored) for a malformed id or
        address. ``notify``: tell the listener (an entry this picker learned itself)."""
        if not valid_id(response_id) or ADDRESS_PATTERN.fullmatch(address) is None:
            return False
        if notify and self.listener is not None:
            self.listener(response_id, address)
        old = self._map.pop(response_id, None)
        if old is not None:
            self._bytes -= self._cost(response_id, old)
        self._map[response_id] = address
        self._bytes += self._cost(response_id, address)
        while len(self._map) > self.max_entries or self._bytes > self.max_bytes:
            rid, addr = self._map.popitem(last=False)
            self._bytes -= self._cost(rid, addr)
            self.evicted += 1
        return True

    def lookup(self, response_id: str) -> str | None:
        """The endpoint that served ``response_id`` (the entry becomes the most recent)."""
        address = self._map.get(response_id)
        if address is not None:
            self._map.move_to_end(response_id)
        return address

    def forget_endpoint(self, address: str) -> int:
        """Drop every response of ``address`` (discovery removed it: its responses went with it)."""
        gone = [rid for rid, a in self._map.items() if a == address]
        for rid in gone:
            self._bytes -= self._cost(rid, self._map.pop(rid))
        return len(gone)

    def export_state(self) -> dict[str, str]:
        """Least recent first (a restore in this order keeps the LRU order)."""
        return dict(self._map)

    def import_state(self, state: Mapping[str, object], replace: bool = True) -> int:
        """Restore (``replace``) or merge a snapshot's entries; malformed ones are skipped.
        Returns how many were taken."""
        if replace:
            self._map.clear()
            self._bytes = 0
        taken = 0
        for rid, address in state.items():
            if isinstance(address, str) and self.remember(str(rid), address, notify=False):
                taken += 1
        return taken
