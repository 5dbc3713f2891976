"""Flow control in the simulator (sim/gateway.py): off changes nothing; on, an overloaded cluster
holds requests in a bounded queue, sheds what waited past its TTL, and clients retry."""

from __future__ import annotations

import json
import math
from collections.abc import Callable
from dataclasses import replace
from typing import Any

import pytest

from smetric.core.views import EndpointSnapshot, RequestView
from smetric.sim.gateway import SimGateway
from smetric.sim.simulator import SimConfig, simulate
from tests.support.sim_synth import agent_work

BASE = SimConfig(instances=2, warmup_s=0.0, measure_s=600.0, seed=3, arrivals="cold")


def with_fc(**kw: object) -> SimConfig:
    return replace(BASE, flow_control=json.dumps({"enabled": True, **kw}, sort_keys=True))


def comparable(d: dict[str, object]) -> dict[str, object]:
    return {k: v for k, v in d.items() if k not in ("sim_wall_s", "events_per_s")}


def test_disabled_flow_control_changes_nothing() -> None:
    w = agent_work()
    a = simulate(w, "smetric", 0.2, BASE).to_dict()
    b = simulate(w, "smetric", 0.2, replace(BASE, flow_control='{"enabled": false}')).to_dict()
    assert comparable(a) == comparable(b)
    assert "fc_sheds" not in a


def test_overload_is_held_in_a_bounded_queue_and_shed_within_its_ttl() -> None:
    w = agent_work()
    res = simulate(w, "smetric", 0.2, with_fc(max_queued=4, ttl_s=3.0, retry_after_s=2.0), keep_records=True)
    m = res.metrics
    assert int(m["fc_queued_dispatches"]) > 0  # some requests waited at the gateway
    assert int(m["fc_queue_max"]) <= 4
    assert int(m["fc_sheds"]) > 0
    # the guard: nothing waits at the gateway past its TTL (one scrape tick of slack)
    assert float(m["fc_wait_max_s"]) <= 3.0 + BASE.refresh_s + 1e-9
    # retried requests keep their first send: TTFT counts the client's whole wait
    for r in res.records:
        if math.isfinite(r.first_token_s):
            assert r.first_token_s >= r.send_s


def test_every_policy_can_run_behind_flow_control() -> None:
    w = agent_work()
    for policy in ("round-robin", "dynamo", "load-balance"):
        m = simulate(w, policy, 0.2, with_fc(ttl_s=5.0)).metrics
        assert int(m["requests_sent"]) > 0 and "fc_shed_share" in m


def test_clients_give_up_after_max_retries_and_their_session_goes_on() -> None:
    w = agent_work()
    m = simulate(
        w, "smetric", 0.2, with_fc(max_queued=1, ttl_s=0.5, retry_after_s=0.5, max_retries=0)
    ).metrics
    assert float(m["fc_failed_share"]) > 0
    assert int(m["requests_sent"]) > 0


def test_bad_flow_control_settings_are_refused_clearly() -> None:
    with pytest.raises(ValueError, match="unknown keys"):
        replace(BASE, flow_control='{"enabled": true, "ttl": 3}')
    with pytest.raises(ValueError, match="ttl_s"):
        replace(BASE, flow_control='{"enabled": true, "ttl_s": -1}')
    with pytest.raises(ValueError, match="not JSON"):
        replace(BASE, flow_control="{")


def _run_spying_dispatch(
    monkeypatch: pytest.MonkeyPatch,
    on_dispatch: Callable[[Any, int, RequestView, list[EndpointSnapshot], float], None],
    cfg: SimConfig,
) -> dict[str, float]:
    """Simulate SMetric on ``agent_work()`` under ``cfg``, calling ``on_dispatch(run, key, rview,
    snaps, t)`` before every dispatch; the run's metrics."""
    from smetric.sim import simulator

    original = simulator._Run.dispatch

    def spy(
        self: simulator._Run,
        key: int,
        req: object,
        rview: RequestView,
        snaps: list[EndpointSnapshot],
        t: float,
    ) -> None:
        on_dispatch(self, key, rview, snaps, t)
        original(self, key, req, rview, snaps, t)  # type: ignore[arg-type]

    monkeypatch.setattr(simulator._Run, "dispatch", spy)
    try:
        return simulate(agent_work(), "smetric", 0.3, cfg).metrics
    finally:
        monkeypatch.setattr(simulator._Run, "dispatch", original)


def _dispatched_while_fresh_waits(
    monkeypatch: pytest.MonkeyPatch,
    counted: Callable[[SimGateway, int, RequestView, list[EndpointSnapshot]], bool],
    **fc: object,
) -> tuple[int, int]:
    """Dispatches of the requests ``counted`` picks, and of those the ones made while a fresh request
    waited in the gateway queue (SMetric, a short overloaded run)."""
    seen = [0, 0]

    def count(run: Any, key: int, rview: RequestView, snaps: list[EndpointSnapshot], t: float) -> None:
        gw = run.gateway
        assert gw is not None
        if counted(gw, key, rview, snaps):
            seen[0] += 1
            seen[1] += gw.queue.waiting_at_or_above(0) > 0

    cfg = replace(with_fc(ttl_s=1.0, retry_after_s=0.5, max_retries=20, **fc), measure_s=150.0)
    _run_spying_dispatch(monkeypatch, count, cfg)
    return seen[0], seen[1]


def test_late_last_dispatches_a_resend_only_when_no_fresh_request_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """Every dispatch of a resend after a 429 (late: its TTFT already counts from the first send)
    happens with no fresh request left in the queue. Guard off (late_last false): resends are
    dispatched while fresh requests wait."""

    def resend(gw: SimGateway, key: int, rview: RequestView, snaps: list[EndpointSnapshot]) -> bool:
        return key in gw.attempts

    late, while_fresh = _dispatched_while_fresh_waits(monkeypatch, resend, late_last=True)
    assert late > 0 and while_fresh == 0
    late_off, while_fresh_off = _dispatched_while_fresh_waits(monkeypatch, resend, late_last=False)
    assert late_off > 0 and while_fresh_off > 0  # the same run without the guard


def test_filter_candidates_sends_a_request_only_where_the_gate_accepts_it(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """With ``filter_candidates`` a policy that reads no SLO (LMetric) dispatches only to instances
    the gate accepts; without it (the gate says only *whether*), it sends some to ones it refuses."""
    from smetric.sim import simulator

    def refused_choices(**fc: object) -> tuple[int, int]:
        seen = [0, 0]  # dispatches with a choice, of which to an instance the gate refuses
        original = simulator._Run.dispatch

        def spy(self: simulator._Run, key: int, req: object, rview: object, snaps: object, t: float) -> None:
            gw = self.gateway
            assert gw is not None
            mask = gw.gate.capable(rview, snaps)  # type: ignore[arg-type]
            original(self, key, req, rview, snaps, t)  # type: ignore[arg-type]
            if any(mask) and not all(mask):
                seen[0] += 1
                seen[1] += not mask[self.table.by_key[key].instance]

        monkeypatch.setattr(simulator._Run, "dispatch", spy)
        simulate(
            agent_work(),
            "lmetric",
            0.3,
            replace(with_fc(ttl_s=1.0, retry_after_s=0.5, **fc), measure_s=150.0),
        )
        monkeypatch.setattr(simulator._Run, "dispatch", original)
        return seen[0], seen[1]

    chosen, refused = refused_choices(filter_candidates=True)
    assert chosen > 0 and refused == 0
    chosen_off, refused_off = refused_choices(filter_candidates=False)
    assert chosen_off > 0 and refused_off > 0


def test_hopeless_last_dispatches_a_hopeless_request_only_when_no_fresh_one_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """hopeless_last: a request no instance could serve within its SLO even idle is dispatched only with no fresh
    request left in the queue. Guard off: such requests are dispatched while fresh ones wait."""
    hopeless, while_fresh = _dispatched_while_fresh_waits(monkeypatch, _doomed, hopeless_last=True)
    assert hopeless > 0 and while_fresh == 0
    hopeless_off, while_fresh_off = _dispatched_while_fresh_waits(monkeypatch, _doomed, hopeless_last=False)
    assert hopeless_off > 0 and while_fresh_off > 0  # the same run without the guard


def _doomed(gw: SimGateway, key: int, rview: RequestView, snaps: list[EndpointSnapshot]) -> bool:
    """What the gate calls hopeless with the setting on (also counted in the run without it)."""
    from smetric.policy.flowcontrol import FlowGate

    g = gw.gate
    return FlowGate(replace(g.config, hopeless_last=True), g._params).hopeless(rview, snaps)


def test_cold_last_dispatches_a_turn_no_gpu_holds_only_when_no_fresh_one_waits(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """cold_last: a first attempt whose session no instance holds (and the tier cannot supply) is
    dispatched only with no fresh request left in the queue. Guard off: such turns are dispatched
    while fresh ones wait."""
    cold, while_fresh = _dispatched_while_fresh_waits(
        monkeypatch, _marked_cold, cold_last=True, hopeless_last=False
    )
    assert cold > 0 and while_fresh == 0
    cold_off, while_fresh_off = _dispatched_while_fresh_waits(
        monkeypatch, _marked_cold, cold_last=False, hopeless_last=False
    )
    assert cold_off > 0 and while_fresh_off > 0  # the same run without the guard


def _marked_cold(gw: SimGateway, key: int, rview: RequestView, snaps: list[EndpointSnapshot]) -> bool:
    """With the setting on: the keys the gateway marked at their first attempt; off: what the gate
    would call cold at dispatch."""
    from smetric.policy.flowcontrol import FlowGate

    if gw.cfg.cold_last:
        return key in gw.hopeless
    g = gw.gate
    return FlowGate(replace(g.config, cold_last=True), g._params).cold(rview, snaps)


def test_a_session_budget_refuses_new_sessions_while_the_pool_has_its_limit_live(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """session_budget: no request of a session that is not live is admitted while ``limit`` sessions
    are live (a session is live from an admitted request until idle ``session_idle_s``); the refused
    ones get a 429 (reason ``sessions``) and their clients resend. Counted here by family (a family
    runs one or more sessions, so live families <= live sessions). Guard off: more at once."""

    def most_live(**fc: object) -> tuple[int, dict[str, float]]:
        seen: dict[int, float] = {}  # family -> last dispatched
        peak = [0]

        def track(run: Any, key: int, rview: RequestView, snaps: list[EndpointSnapshot], t: float) -> None:
            seen[(key // run.n) * run.n_fam + int(run.work.family_index[key % run.n])] = t
            live = sum(1 for s in seen.values() if s > t - 25.0)  # admitted <= 2 s (TTL) before
            peak[0] = max(peak[0], live)

        cfg = replace(with_fc(retry_after_s=1.0, **fc), measure_s=300.0)
        metrics = _run_spying_dispatch(monkeypatch, track, cfg)
        return peak[0], metrics

    peak, m = most_live(session_budget=2, session_idle_s=30.0)
    # families dispatched within 25 s: each still live (idle < 30 s), so at most the budget
    assert peak <= 2 and int(m["fc_sheds_sessions"]) > 0
    peak_off, m_off = most_live()
    assert peak_off > 2 and "fc_sheds_sessions" not in m_off


def test_an_adaptive_session_budget_reads_what_the_chosen_instance_held() -> None:
    """session_miss_share: the simulator reports each dispatch's held prefix (GPU or tier) to the
    budget, which binds once returning turns miss. Without a tier these sessions' returning turns
    miss on two instances (new sessions refused); with the full tier the tier holds them (none
    refused); without the share no count at all. Guard off (no report): none refused."""

    def session_sheds(tier: str, **fc: object) -> int:
        cfg = replace(with_fc(retry_after_s=1.0, **fc), measure_s=300.0, global_tier=tier)
        return int(simulate(agent_work(), "smetric", 0.3, cfg).metrics.get("fc_sheds_sessions", 0))

    assert session_sheds("none", session_miss_share=0.2, session_window=4) > 0
    assert session_sheds("full", session_miss_share=0.2, session_window=4) == 0
    assert session_sheds("none") == 0


def test_the_fc_flag_names_every_flow_control_setting() -> None:
    """``smetric simulate --fc KEY=VALUE``'s help lists every key the config accepts."""
    from dataclasses import fields

    from smetric.policy.flowcontrol import FlowControlConfig
    from smetric.sim.cli import parser

    (action,) = [a for a in parser()._actions if "--fc" in a.option_strings]
    help_text = " ".join(str(action.help).split())
    missing = [f.name for f in fields(FlowControlConfig) if f.name != "enabled" and f.name not in help_text]
    assert missing == []


def test_a_kv_sized_session_budget_reads_the_pools_kv_capacity() -> None:
    """session_kv_share: a new session is refused while the live sessions' prompts exceed the share of
    the instances' KV tokens (the snapshots' kv_capacity_tokens); a share far above the pool's
    load refuses nothing."""
    cfg = replace(with_fc(retry_after_s=1.0, session_kv_share=0.01), measure_s=300.0)
    m = simulate(agent_work(), "smetric", 0.3, cfg).metrics
    assert int(m["fc_sheds_sessions"]) > 0
    roomy = replace(with_fc(retry_after_s=1.0, session_kv_share=100.0), measure_s=300.0)
    assert "fc_sheds_sessions" not in simulate(agent_work(), "smetric", 0.3, roomy).metrics


def test_agents_that_wait_for_the_session_budget_give_up_no_turn_for_it() -> None:
    """sessions_wait: a 429 for the session budget is not counted against max_retries (the agent
    waits to start its session). Guard off: with max_retries 0 every such 429 gives the turn up."""

    def failed(wait: bool) -> tuple[float, int]:
        cfg = replace(
            with_fc(retry_after_s=1.0, ttl_s=600.0, session_budget=1, max_retries=0, sessions_wait=wait),
            measure_s=300.0,
        )
        m = simulate(agent_work(), "smetric", 0.3, cfg).metrics
        return float(m["fc_failed_share"]), int(m["fc_sheds_sessions"])

    share, sheds = failed(wait=True)
    share_off, sheds_off = failed(wait=False)
    assert sheds > 0 and sheds_off > 0
    assert share_off > 0.5 and share == 0.0
