"""A budget of live sessions: admission by session, not by request (a simulator ablation of the
flow control, docs/overload.md, 8g; ``FlowControlConfig.session_budget`` / ``session_kv_share``).

Past the knee of a pool without a full global tier the sessions in flight outgrow the GPUs' KV and
evict each other; the request gate (:mod:`smetric.policy.flowcontrol`) sheds turns the agents
resend, so the sessions stay in flight. This budget keeps a new session out instead while the pool
already has its share of live ones. Pure logic, no I/O and no clock: callers pass ``now_s``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable


class SessionBudget:
    """A budget of live sessions: a session becomes live when a request of it is admitted and stays
    live until it has been idle ``idle_s`` (no request admitted or finished). A request of a live
    session is always admitted; one of a new session only while fewer than ``limit`` sessions are
    live (``limit`` 0: no count) and, with ``kv_share``, while the live sessions' prompts plus its own
    fit ``kv_share`` x the pool's KV tokens (each session counts its latest prompt). Memory: one
    entry per live session. Pure: callers pass ``now_s``."""

    __slots__ = ("_idle_s", "_kv_share", "_limit", "_live", "_tokens")

    def __init__(self, limit: int, idle_s: float, kv_share: float = 0.0) -> None:
        if limit < 0 or not (math.isfinite(idle_s) and idle_s > 0):
            raise ValueError(f"invalid session budget: limit {limit}, idle_s {idle_s}")
        if not (math.isfinite(kv_share) and kv_share >= 0) or (limit == 0 and kv_share == 0):
            raise ValueError(f"invalid session budget: limit {limit}, kv_share {kv_share}")
        self._limit = limit
        self._idle_s = idle_s
        self._kv_share = kv_share
        # session -> (last seen, prompt tokens); insertion order = last-seen order
        self._live: dict[Hashable, tuple[float, int]] = {}
        self._tokens = 0  # the live sessions' prompt tokens

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, session: Hashable) -> bool:
        return session in self._live

    @property
    def tokens(self) -> int:
        return self._tokens

    def _prune(self, now_s: float) -> None:
        live = self._live
        horizon = now_s - self._idle_s
        while live:
            first = next(iter(live))
            seen, tokens = live[first]
            if seen > horizon:
                break
            del live[first]
            self._tokens -= tokens

    def admits(self, session: Hashable, now_s: float, tokens: int = 0, kv_tokens: int = 0) -> bool:
        """Whether a request of ``session`` (``tokens`` prompt tokens; the pool holds ``kv_tokens``
        KV tokens, 0 unknown) may go now. It does not make the session live (:meth:`touch`)."""
        self._prune(now_s)
        if session in self._live:
            return True
        if self._limit and len(self._live) >= self._limit:
            return False
        return not (self._kv_share and kv_tokens > 0 and self._tokens + tokens > self._kv_share * kv_tokens)

    def touch(self, session: Hashable, now_s: float, tokens: int | None = None) -> None:
        """``session`` was seen at ``now_s`` (a request admitted, ``tokens`` its prompt; or one
        finished, ``None``: the footprint stays): live from now."""
        live = self._live
        old = live.pop(session, None)
        kept = old[1] if old is not None else 0
        new = kept if tokens is None else max(0, tokens)
        self._tokens += new - kept
        live[session] = (now_s, new)
