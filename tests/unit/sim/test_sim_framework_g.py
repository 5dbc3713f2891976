"""The framework's g in a pool with a global tier: the flow gate's TTFT estimate and the dispatch ledger's charge
read the one tier model for every policy, a baseline as shipped included (``SimConfig.framework_g``,
docs/overload.md 8e). The session's previous turn, what a baseline's snapshots carried before, credits a turn the
tier never got (a shed or failed one, an answer LMCache does not store)."""

from __future__ import annotations

from dataclasses import replace

import pytest

from smetric.sim.simulator import SimConfig, _Run
from smetric.sim.workload import PreparedWorkload
from tests.support.sim_synth import agent_work

CFG = SimConfig(instances=3, warmup_s=0.0, measure_s=600.0, seed=5, arrivals="cold", global_tier="full")


@pytest.mark.parametrize(
    ("policy", "cfg", "built"),
    [
        ("lmetric", CFG, True),  # a baseline in a pool with a tier: the framework's g
        ("round-robin", replace(CFG, mode="disaggregated"), True),
        ("lmetric", replace(CFG, framework_g="session"), False),  # the runs before 6 Dec 2026
        ("lmetric", replace(CFG, global_tier="none"), False),  # no tier: nothing to read
        ("smetric", replace(CFG, framework_g="session"), True),  # its rule reads the tier either way
    ],
)
def test_the_tier_view_is_built_for_every_policy_in_a_pool_with_a_tier(
    policy: str, cfg: SimConfig, built: bool
) -> None:
    assert (_Run(agent_work(), policy, cfg).tier_view is not None) is built


def _follow_up(w: PreparedWorkload) -> int:
    """The key of a follow-up whose previous turn the session recorded (est_hit > 0)."""
    return next(k for k in range(len(w)) if w.view(k, 0).est_hit_tokens > 0)


def test_a_baselines_g_is_what_was_routed_not_the_previous_turn() -> None:
    w = agent_work()
    tier, session = _Run(w, "lmetric", CFG), _Run(w, "lmetric", replace(CFG, framework_g="session"))
    key = _follow_up(w)
    req, view = w.keyed_request(key), w.view(key, 0)
    # nothing routed yet: the tier model holds none of the session, the previous-turn estimate credits it all
    assert {s.global_hit_tokens for s in tier.snapshots(req, view, 0.0)} == {0}
    assert {s.global_hit_tokens for s in session.snapshots(req, view, 0.0)} == {
        min(view.est_hit_tokens, view.prompt_tokens)
    }
    # the previous turn routed: the tier model credits its whole LMCache chunks
    prev = max(k for k in range(key) if w.view(k, 0).session_id == view.session_id)
    preq, pview = w.keyed_request(prev), w.view(prev, 0)
    tv = tier.tier_view
    assert tv is not None
    tv.dispatched(tier.snapshots(preq, pview, 0.0)[0], pview, 0.0, preq.prompt_pieces, preq.prompt_tokens)
    g = {s.global_hit_tokens for s in tier.snapshots(req, view, 1.0)}
    assert len(g) == 1 and 0 < g.pop() <= preq.prompt_tokens
