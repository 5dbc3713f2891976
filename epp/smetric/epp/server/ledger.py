"""Router-side dispatch ledger: prefill work sent to each endpoint but not yet first-tokened (q[i]).

A request's uncached prompt tokens and their cost-model seconds are added at dispatch and removed
once, at the first response body chunk (streaming) or the response headers (non-streaming), or when
the stream ends for any other reason (error, client cancel). The ledger is per picker replica: with
several active-active replicas each sees only the work it dispatched itself (see docs/picker.md).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from types import MappingProxyType


@dataclass(frozen=True, slots=True)
class LedgerEntry:
    address: str
    tokens: float
    cost_s: float


class DispatchLedger:
    __slots__ = ("_cost", "_cost_view", "_entries", "_tokens", "_tokens_view")

    def __init__(self) -> None:
        self._entries: dict[str, LedgerEntry] = {}
        self._tokens: dict[str, float] = {}
        self._cost: dict[str, float] = {}
        self._tokens_view = MappingProxyType(self._tokens)
        self._cost_view = MappingProxyType(self._cost)

    def add(self, request_id: str, address: str, tokens: float, cost_s: float) -> None:
        """Record a dispatch; a request id already present is replaced (its old work removed)."""
        self.remove(request_id)
        self._entries[request_id] = LedgerEntry(address, tokens, cost_s)
        self._tokens[address] = self._tokens.get(address, 0.0) + tokens
        self._cost[address] = self._cost.get(address, 0.0) + cost_s

    def remove(self, request_id: str) -> LedgerEntry | None:
        """Idempotent: the first call returns the entry, later calls ``None``."""
        entry = self._entries.pop(request_id, None)
        if entry is None:
            return None
        tokens = self._tokens[entry.address] - entry.tokens
        cost = self._cost[entry.address] - entry.cost_s
        # clamp float drift so an idle endpoint reads exactly zero
        self._tokens[entry.address] = tokens if tokens > 1e-6 else 0.0
        self._cost[entry.address] = cost if cost > 1e-12 else 0.0
        return entry

    def totals(self) -> tuple[Mapping[str, float], Mapping[str, float]]:
        """Read-only views ``(tokens by address, cost seconds by address)`` for bulk lookups."""
        return self._tokens_view, self._cost_view

    def queued_tokens(self, address: str) -> float:
        return self._tokens.get(address, 0.0)

    def queued_cost_s(self, address: str) -> float:
        return self._cost.get(address, 0.0)

    def __len__(self) -> int:
        return len(self._entries)
