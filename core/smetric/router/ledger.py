"""Router-side dispatch ledger: work sent to each endpoint but not yet first-tokened (q[i]).

A request's computed prompt tokens, their cost-model seconds and, apart, the global-tier fetch
seconds of the tokens it loads (:func:`smetric.router.dispatch_work`) are added at dispatch and
removed once, at its first token (the picker: first response body chunk of a streaming response,
or the response headers; the stream ending for any other reason also releases it). The ledger is
per router: with several active-active picker replicas each sees only the work it dispatched
itself (see docs/picker.md).
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    address: str
    tokens: float
    cost_s: float
    fetch_s: float = 0.0


class DispatchLedger:
    __slots__ = ("_cost", "_cost_view", "_entries", "_fetch", "_fetch_view", "_tokens", "_tokens_view")

    def __init__(self) -> None:
        self._entries: dict[Hashable, LedgerEntry] = {}
        self._tokens: dict[str, float] = {}
        self._cost: dict[str, float] = {}
        self._fetch: dict[str, float] = {}
        self._tokens_view = MappingProxyType(self._tokens)
        self._cost_view = MappingProxyType(self._cost)
        self._fetch_view = MappingProxyType(self._fetch)

    def add(
        self, request_id: Hashable, address: str, tokens: float, cost_s: float, fetch_s: float = 0.0
    ) -> None:
        """Record a dispatch; a request id already present is replaced (its old work removed)."""
        self.remove(request_id)
        self._entries[request_id] = LedgerEntry(address, tokens, cost_s, fetch_s)
        self._tokens[address] = self._tokens.get(address, 0.0) + tokens
        self._cost[address] = self._cost.get(address, 0.0) + cost_s
        if fetch_s:
            self._fetch[address] = self._fetch.get(address, 0.0) + fetch_s

    def remove(self, request_id: Hashable) -> LedgerEntry | None:
        """Idempotent: the first call returns the entry, later calls ``None``."""
        entry = self._entries.pop(request_id, None)
        if entry is None:
            return None
        a = entry.address
        tokens = self._tokens[a] - entry.tokens
        cost = self._cost[a] - entry.cost_s
        # clamp float drift so an idle endpoint reads exactly zero
        self._tokens[a] = tokens if tokens > 1e-6 else 0.0
        self._cost[a] = cost if cost > 1e-12 else 0.0
        if entry.fetch_s:
            fetch = self._fetch.get(a, 0.0) - entry.fetch_s
            self._fetch[a] = fetch if fetch > 1e-12 else 0.0
        return entry

    def totals(self) -> tuple[Mapping[str, float], Mapping[str, float]]:
        """Read-only views ``(tokens by address, cost seconds by address)`` for bulk lookups."""
        return self._tokens_view, self._cost_view

    def fetch_totals(self) -> Mapping[str, float]:
        """Read-only view of the queued global-tier fetch seconds by address."""
        return self._fetch_view

    def queued_tokens(self, address: str) -> float:
        return self._tokens.get(address, 0.0)

    def queued_cost_s(self, address: str) -> float:
        return self._cost.get(address, 0.0)

    def queued_fetch_s(self, address: str) -> float:
        return self._fetch.get(address, 0.0)

    def __len__(self) -> int:
        return len(self._entries)
