"""Session-KV footprint per endpoint: what ``smetric-tiered`` balances first turns against.

Both the simulator and the picker keep one :class:`FootprintTracker` and report its value as
``EndpointSnapshot.session_kv_tokens``. At each dispatch the target's footprint grows by the
tokens the request writes into its local tier that were not there (``L - c[target]``: a
follow-up that sticks adds its new turn, a migrated or placed session its whole context). The
footprint decays exponentially with time constant ``window_s``: a session that does not come
back stops counting, and a session that moved away keeps counting on its old endpoint for a
while, as its KV really stays there until evicted. No session id is needed.

O(1) memory per endpoint (a value and a time stamp); endpoints are forgotten when the picker's
discovery drops them (:meth:`forget`). Bad input (negative or non-finite tokens or times) is
ignored rather than propagated.
"""

from __future__ import annotations

import math


class FootprintTracker:
    __slots__ = ("_state", "window_s")

    def __init__(self, window_s: float) -> None:
        if not (math.isfinite(window_s) and window_s > 0):
            raise ValueError(f"window_s must be finite and > 0, got {window_s}")
        self.window_s = window_s
        self._state: dict[str, tuple[float, float]] = {}  # endpoint -> (tokens, at_s)

    def add(self, endpoint: str, tokens: float, now_s: float) -> None:
        if not (math.isfinite(tokens) and tokens > 0 and math.isfinite(now_s)):
            return
        self._state[endpoint] = (self.tokens(endpoint, now_s) + tokens, now_s)

    def tokens(self, endpoint: str, now_s: float) -> float:
        entry = self._state.get(endpoint)
        if entry is None:
            return 0.0
        value, at_s = entry
        age = now_s - at_s
        if not age > 0:  # same instant, or a clock that went back: no decay
            return value
        return value * math.exp(-age / self.window_s)

    def forget(self, endpoint: str) -> None:
        self._state.pop(endpoint, None)

    def __len__(self) -> int:
        return len(self._state)
