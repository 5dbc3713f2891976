"""The session budget (smetric.policy.session_budget): live sessions always go, a new one only
below the count and KV bounds; idle sessions free their slot."""

from __future__ import annotations

import pytest

from smetric.policy.flowcontrol import FlowControlConfig
from smetric.policy.session_budget import SessionBudget


def test_a_session_budget_admits_live_sessions_and_new_ones_only_below_its_limit() -> None:
    b = SessionBudget(limit=2, idle_s=10.0)
    assert b.admits("a", 0.0)
    b.touch("a", 0.0)
    b.touch("b", 1.0)
    assert not b.admits("c", 5.0)  # two live: a new session waits
    assert b.admits("a", 5.0) and b.admits("b", 5.0)  # a live one always goes
    b.touch("a", 6.0)  # a finished turn keeps "a" live
    assert not b.admits("c", 10.5)  # "b" idle 9.5 s: still live
    assert b.admits("c", 11.5) and "b" not in b and "a" in b  # "b" idle 10 s: its slot is free
    b.touch("c", 11.5)
    assert len(b) == 2 and not b.admits("d", 12.0)
    assert b.admits("d", 40.0) and len(b) == 0  # every session idle: all slots free
    with pytest.raises(ValueError):
        SessionBudget(limit=0, idle_s=10.0)
    with pytest.raises(ValueError, match="session_budget"):
        FlowControlConfig(session_budget=-1)


def test_a_kv_sized_session_budget_counts_the_live_sessions_prompts() -> None:
    b = SessionBudget(limit=0, idle_s=10.0, kv_share=1.0)
    assert b.admits("a", 0.0, tokens=60, kv_tokens=100)
    b.touch("a", 0.0, tokens=60)
    assert not b.admits("b", 1.0, tokens=50, kv_tokens=100)  # 60 + 50 > 100
    assert b.admits("b", 1.0, tokens=40, kv_tokens=100)
    assert b.admits("b", 1.0, tokens=50, kv_tokens=0)  # the pool's KV unknown: no token bound
    b.touch("b", 1.0, tokens=40)
    assert b.tokens == 100
    b.touch("a", 5.0, tokens=70)  # "a"'s next turn: its footprint is its latest prompt
    b.touch("a", 6.0)  # a finished turn keeps it
    assert b.tokens == 110 and b.admits("a", 6.0, tokens=500, kv_tokens=100)  # live: always admitted
    assert b.admits("c", 11.5, tokens=30, kv_tokens=100) and b.tokens == 70  # "b" went idle
    with pytest.raises(ValueError):
        SessionBudget(limit=0, idle_s=10.0)  # neither bound


def _returning_turns(b: SessionBudget, sessions: list[str], held: int, prompt: int = 100) -> None:
    """One returning turn of each session (its first dispatched turn, if new, does not count)."""
    for s in sessions:
        b.dispatched(s, held, prompt)


def test_an_adaptive_session_budget_binds_only_once_returning_turns_miss_their_prompt() -> None:
    """session_miss_share: unbounded while the live sessions' returning turns find their prompt held;
    once more than the share of a window miss (held < half the prompt), the count halves from the
    live count, and climbs back by one per clean window while it binds. First turns never count."""
    b = SessionBudget(limit=0, idle_s=100.0, miss_share=0.2, window=5)
    live = [f"s{i}" for i in range(8)]
    for s in live:
        b.touch(s, 0.0, tokens=100)
        b.dispatched(s, 0, 100)  # a first turn: cold by nature, not a miss
    assert b.limit == 0 and b.admits("new", 1.0)
    _returning_turns(b, live[:5], held=90)  # a clean window: no count
    assert b.limit == 0
    _returning_turns(b, live[:5], held=10)  # five misses of five: the sessions outgrew the pool
    assert b.limit == 4 and not b.admits("new", 1.0) and b.admits("s0", 1.0)
    _returning_turns(b, live[:5], held=90)  # a clean window while it binds (8 live): one more
    assert b.limit == 5
    _returning_turns(b, live[:5], held=10)  # misses again: half of min(limit, live)
    assert b.limit == 2
    with pytest.raises(ValueError, match="miss_share"):
        SessionBudget(limit=0, idle_s=10.0, miss_share=1.0)
    with pytest.raises(ValueError, match="session_miss_share"):
        FlowControlConfig(session_miss_share=-0.1)


def test_without_a_miss_share_the_count_never_adapts() -> None:
    """Guard off (a fixed count): misses change nothing."""
    b = SessionBudget(limit=3, idle_s=100.0, window=2)
    for s in ("a", "b"):
        b.touch(s, 0.0, tokens=100)
        b.dispatched(s, 0, 100)
    _returning_turns(b, ["a", "b"] * 5, held=0)
    assert b.limit == 3 and b.admits("c", 1.0)


def test_the_live_session_map_keeps_its_memory_budget() -> None:
    """At most ``max_sessions`` entries: the least recently seen goes first, its tokens with it.
    Guard off (no bound): every session stays."""
    b = SessionBudget(limit=0, idle_s=100.0, miss_share=0.2, max_sessions=2)
    for i, s in enumerate(("a", "b", "c")):
        b.touch(s, float(i), tokens=10 * (i + 1))
    assert len(b) == 2 and "a" not in b and b.tokens == 50
    unbounded = SessionBudget(limit=0, idle_s=100.0, miss_share=0.2, max_sessions=1 << 30)
    for i, s in enumerate(("a", "b", "c")):
        unbounded.touch(s, float(i), tokens=10)
    assert len(unbounded) == 3
    with pytest.raises(ValueError, match="max_sessions"):
        SessionBudget(limit=1, idle_s=10.0, max_sessions=0)


def test_the_picker_config_offers_the_adaptive_budget_only() -> None:
    """flowControl.sessionMissShare / sessionWindow / sessionIdleS map onto the flow-control config;
    out of range is refused at the trust boundary."""
    from pydantic import ValidationError

    from smetric.policy.pickerconfig import FlowControlSection

    cfg = FlowControlSection(sessionMissShare=0.2, sessionWindow=10, sessionIdleS=30).config()
    assert (cfg.session_miss_share, cfg.session_window, cfg.session_idle_s) == (0.2, 10, 30.0)
    assert cfg.session_budget == 0 and cfg.session_kv_share == 0  # the fixed forms stay ablations
    for bad in ({"sessionMissShare": 1.0}, {"sessionWindow": 0}, {"sessionIdleS": 0}):
        with pytest.raises(ValidationError):
            FlowControlSection(**bad)
