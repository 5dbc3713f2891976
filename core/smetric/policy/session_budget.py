"""A budget of live sessions: admission by session, not by request (flow control's, docs/overload.md,
8g: ``FlowControlConfig.session_budget`` / ``session_kv_share``, simulator ablations, and the adaptive
``session_miss_share``, also offered in the picker, off by default).

Past the knee of a pool without a full global tier the sessions in flight outgrow the GPUs' KV and
evict each other; the request gate (:mod:`smetric.policy.flowcontrol`) sheds turns the agents
resend, so the sessions stay in flight. This budget keeps a new session out instead while the pool
already has its share of live ones. Pure logic, no I/O and no clock: callers pass ``now_s``.
"""

from __future__ import annotations

import math
from collections.abc import Hashable
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from smetric.policy.flowcontrol import FlowControlConfig

# the adaptive count's multiplicative decrease (TCP's AIMD shape; Envoy's adaptive concurrency
# filter and Netflix's concurrency-limits use the same form): 0.5 chosen over 0.8 on development
# seeds 0-2 (docs/overload.md, 8g)
_DECREASE = 0.5
# the held share below which a returning turn counts as a miss: not tuned
_HELD_SHARE = 0.5
# the live-session map's memory budget (entries; a key is the caller's, the picker passes a hash)
MAX_SESSIONS = 65_536


class SessionBudget:
    """A budget of live sessions: a session becomes live when a request of it is admitted and stays
    live until it has been idle ``idle_s`` (no request admitted or finished). A request of a live
    session is always admitted; one of a new session only while fewer than ``limit`` sessions are
    live (``limit`` 0: no count) and, with ``kv_share``, while the live sessions' prompts plus its own
    fit ``kv_share`` x the pool's KV tokens (each session counts its latest prompt).

    ``miss_share`` > 0 makes the count adaptive: it starts unbounded (or at ``limit``) and binds only
    once the sessions outgrow the pool, read where it shows: of every ``window`` *returning* turns
    (a live session's turn after its first dispatched one; :meth:`dispatched`), the share whose
    chosen endpoint held (GPU or tier) less than half the prompt. Above ``miss_share`` the limit
    falls to half the live count (multiplicative decrease, at least 1); at or below it, while the
    limit binds, it rises by one (additive increase). A session's first turn is cold by nature and
    does not count. Memory: one entry per live session, at most ``max_sessions`` (the least recently
    seen goes first). Pure: callers pass ``now_s``."""

    __slots__ = (
        "_idle_s",
        "_kv_share",
        "_limit",
        "_live",
        "_max_sessions",
        "_miss_share",
        "_misses",
        "_returning",
        "_tokens",
        "_window",
    )

    def __init__(
        self,
        limit: int,
        idle_s: float,
        kv_share: float = 0.0,
        miss_share: float = 0.0,
        window: int = 20,
        max_sessions: int = MAX_SESSIONS,
    ) -> None:
        if limit < 0 or not (math.isfinite(idle_s) and idle_s > 0):
            raise ValueError(f"invalid session budget: limit {limit}, idle_s {idle_s}")
        if not (math.isfinite(miss_share) and 0 <= miss_share < 1) or window < 1:
            raise ValueError(f"invalid session budget: miss_share {miss_share}, window {window}")
        if not (math.isfinite(kv_share) and kv_share >= 0) or (
            limit == 0 and kv_share == 0 and miss_share == 0
        ):
            raise ValueError(f"invalid session budget: limit {limit}, kv_share {kv_share}")
        if max_sessions < 1:
            raise ValueError(f"invalid session budget: max_sessions {max_sessions}")
        self._max_sessions = max_sessions
        self._limit = limit
        self._idle_s = idle_s
        self._kv_share = kv_share
        self._miss_share = miss_share
        self._window = window
        self._returning = 0  # returning turns in the current window
        self._misses = 0  # ...of which held less than half their prompt
        # session -> [last seen, prompt tokens, turns dispatched]; insertion order = last-seen order
        self._live: dict[Hashable, list[float]] = {}
        self._tokens = 0  # the live sessions' prompt tokens

    @classmethod
    def from_config(cls, cfg: FlowControlConfig) -> SessionBudget | None:
        """The budget ``cfg``'s session settings describe (the simulator's gateway and the picker);
        ``None`` when none of ``session_budget``, ``session_kv_share``, ``session_miss_share`` is set."""
        if not (cfg.session_budget or cfg.session_kv_share or cfg.session_miss_share):
            return None
        return cls(
            cfg.session_budget,
            cfg.session_idle_s,
            cfg.session_kv_share,
            cfg.session_miss_share,
            cfg.session_window,
        )

    def __len__(self) -> int:
        return len(self._live)

    def __contains__(self, session: Hashable) -> bool:
        return session in self._live

    @property
    def tokens(self) -> int:
        return self._tokens

    @property
    def limit(self) -> int:
        """The count in force (0: none)."""
        return self._limit

    def _prune(self, now_s: float) -> None:
        live = self._live
        horizon = now_s - self._idle_s
        while live:
            first = next(iter(live))
            rec = live[first]
            if rec[0] > horizon:
                break
            del live[first]
            self._tokens -= int(rec[1])

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
        kept = int(old[1]) if old is not None else 0
        new = kept if tokens is None else max(0, tokens)
        self._tokens += new - kept
        live[session] = [now_s, new, old[2] if old is not None else 0]
        if len(live) > self._max_sessions:  # the memory budget: the least recently seen goes
            first = next(iter(live))
            self._tokens -= int(live.pop(first)[1])

    def finished(self, session: Hashable, now_s: float) -> None:
        """A request of ``session`` is over: a finished turn keeps a live session live (its footprint
        stays); a session no longer live is not brought back."""
        if session in self._live:
            self.touch(session, now_s)

    def dispatched(self, session: Hashable, held_tokens: int, prompt_tokens: int) -> None:
        """A turn of ``session`` went to an endpoint holding ``held_tokens`` of its ``prompt_tokens``
        (the adaptive count's signal; a session not live, or without ``miss_share``, is ignored)."""
        rec = self._live.get(session)
        if rec is None:
            return
        rec[2] += 1
        if not self._miss_share or rec[2] == 1:
            return
        self._returning += 1
        if held_tokens < _HELD_SHARE * prompt_tokens:
            self._misses += 1
        if self._returning < self._window:
            return
        live = len(self._live)
        if self._misses > self._miss_share * self._returning:
            base = min(self._limit, live) if self._limit else live
            self._limit = max(1, int(base * _DECREASE))
        elif self._limit and live >= self._limit:
            self._limit += 1
        self._returning = self._misses = 0
