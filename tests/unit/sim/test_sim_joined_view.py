"""The first request of a session an agent joins mid-way, as the simulator's router sees it: a fresh
history (turn 0, no recorded hit) unless the global tier was pre-warmed with its earlier turns."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from smetric.core.presets import get_preset
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import Decision as PolicyDecision
from smetric.sim.simulator import SimConfig, _Run
from smetric.sim.workload import PreparedWorkload, fresh_view, prepare
from tests.support.sim_synth import synthetic

P30 = get_preset("qwen3-30b-h20")
CFG = SimConfig(instances=4, warmup_s=0.0, measure_s=300.0, seed=3, agent_entry_s=0.0)  # agents
WORK = prepare(synthetic(families=6, turns=30, think_s=20.0), P30)

Seen = dict[int, tuple[RequestView, tuple[EndpointSnapshot, ...]]]


class _Seeing(_Run):
    """A run that keeps the view and snapshots its router got for every request key."""

    def __init__(self, work: PreparedWorkload, policy: str, cfg: SimConfig) -> None:
        super().__init__(work, policy, cfg)
        self.seen: Seen = {}
        self.key = -1
        inner, seen = self.router, self.seen

        class _Router:
            def pick(_, request: RequestView, snaps: Sequence[EndpointSnapshot]) -> PolicyDecision:
                seen[self.key] = (request, tuple(snaps))
                return inner.pick(request, list(snaps))

        self.router = _Router()  # type: ignore[assignment]

    def arrival(self, key: int, t: float, fk: int, retry: bool = False) -> None:
        self.key = key
        super().arrival(key, t, fk, retry)


def joined_first(cfg: SimConfig, policy: str = "lmetric") -> tuple[list[int], Seen]:
    """The keys of the joined sessions' first requests (trace turn > 0, the first this run sent of
    its session copy) and every view the router got."""
    run = _Seeing(WORK, policy, cfg)
    run.seed_arrivals(0.5)
    run.run(None)
    n = len(WORK)
    first: dict[tuple[int, str | None], int] = {}
    for row in run.table.rows:  # send order
        clone, i = divmod(row.key, n)
        first.setdefault((clone, WORK.views[i].session_id), row.key)
    joined = [k for k in first.values() if WORK.views[k % n].turn > 0 and k in run.seen]
    assert joined, "no agent joined a session mid-way"
    return joined, run.seen


def test_a_joined_session_starts_as_a_fresh_history_when_no_tier_holds_its_earlier_turns() -> None:
    """Full tier not pre-warmed (the bench's emulated tier starts empty) and no tier at all: turn 0,
    no recorded hit, so no router estimates a global hit for it; its later turns keep the trace's."""
    n = len(WORK)
    for cfg in (
        dataclasses.replace(CFG, global_tier="full", prewarm_global_tier=False),
        dataclasses.replace(CFG, global_tier="none"),
    ):
        joined, seen = joined_first(cfg)
        for k in joined:
            view, snaps = seen[k]
            assert (view.turn, view.est_hit_tokens) == (0, 0), cfg.global_tier
            assert view.prompt_tokens == WORK.views[k % n].prompt_tokens
            assert all(s.global_hit_tokens == 0 for s in snaps)
            nxt = int(WORK.next[k % n])
            if nxt >= 0 and (k - k % n) + nxt in seen:
                later, _ = seen[(k - k % n) + nxt]
                assert later.turn == WORK.views[nxt].turn > 0
                assert later.est_hit_tokens == WORK.views[nxt].est_hit_tokens > 0


def test_a_joined_session_keeps_its_turn_and_recorded_hit_when_the_tier_was_pre_warmed() -> None:
    """The pre-warmed tier holds the session's previous turn (steady state), as for any follow-up."""
    n = len(WORK)
    joined, seen = joined_first(dataclasses.replace(CFG, global_tier="full"))
    for k in joined:
        view, snaps = seen[k]
        assert view.turn == WORK.views[k % n].turn > 0
        assert view.est_hit_tokens == WORK.views[k % n].est_hit_tokens > 0
        assert any(s.global_hit_tokens > 0 for s in snaps)


def test_fresh_view_keeps_the_request_and_drops_its_history() -> None:
    v = RequestView("s#12~1", 140_000, 12, 136_287, "s~1")
    assert fresh_view(v) == RequestView("s#12~1", 140_000, 0, 0, "s~1")
    assert WORK.view(5, 1, fresh=True) == fresh_view(WORK.view(5, 1))
