"""Flow control's gate in the picker's decision (decide.Picker._gated): over which endpoints it
runs (a P/D pool's prefill pods) and, with ``filterCandidates``, where the policy may send the
request (only the endpoints the gate accepts)."""

from __future__ import annotations

import pytest

from smetric.core.names import ROLE_DECODE, ROLE_PREFILL
from smetric.core.views import RequestView
from smetric.epp.contracts import EndpointInfo
from smetric.epp.server.decide import Picker
from smetric.epp.server.flow import Held
from smetric.epp.server.static import StaticEndpointSource
from smetric.policy.base import PolicyParams
from smetric.policy.flowcontrol import FlowControlConfig, FlowGate
from smetric.policy.framework import Router
from smetric.policy.registry import make_policy
from tests.support.epp_harness import EPS, FakeIndex

A, B, C = EPS
# a follow-up turn whose 39k-token prefix A holds; its TTFT SLO is 1 + 0.0625 x 40 = 3.5 s
FOLLOW_UP = RequestView("r", prompt_tokens=40_000, turn=1, est_hit_tokens=39_000)


def _picker(
    policy: str, filter_candidates: bool, endpoints: list[EndpointInfo] | None = None, pd: bool = False
) -> tuple[Picker, FakeIndex]:
    params = PolicyParams()
    index = FakeIndex()
    cfg = FlowControlConfig(enabled=True, filter_candidates=filter_candidates)
    pd_router = Router(make_policy(policy, PolicyParams(mode="disaggregated"))) if pd else None
    p = Picker(
        StaticEndpointSource(endpoints if endpoints is not None else EPS),
        index,
        Router(make_policy(policy, params)),
        params.cost_model,
        pd_router=pd_router,
        is_stale=lambda a: False,
        flow_gate=FlowGate(cfg, params),
    )
    return p, index


@pytest.mark.parametrize("policy", ["lmetric", "dynamo", "load-balance"])
def test_filter_candidates_keeps_a_policy_off_the_endpoints_the_gate_refuses(policy: str) -> None:
    """A holds the session's prefix but 3 s of queued prefill: the gate refuses it, B and C are idle.
    Without the filter the policy still sends the request to A (the gate said only *whether*)."""
    for filtered, to_a in ((False, True), (True, False)):
        p, index = _picker(policy, filtered)
        p.core.ledger.add("queued", A, 20_000, 3.0)
        index.hits = {A: 39_000}
        pick = p.pick(FOLLOW_UP, "x" * 160_000, waited_s=0.0)
        assert (pick.destination == A) is to_a, (policy, filtered)
        assert filtered is False or A not in pick.fallbacks


def test_a_pd_pool_is_gated_on_its_prefill_pods() -> None:
    """Every prefill pod is past the SLO, the decode pods are idle: the request is held. Gated over
    every pod (as before), the decode pods' empty prefill queues let it through to a prefill pod
    where it misses its SLO."""
    eps = [
        EndpointInfo("10.0.1.1:8000", role=ROLE_PREFILL),
        EndpointInfo("10.0.1.2:8000", role=ROLE_PREFILL),
        EndpointInfo("10.0.2.1:8000", role=ROLE_DECODE),
        EndpointInfo("10.0.2.2:8000", role=ROLE_DECODE),
    ]
    p, _ = _picker("smetric", False, eps, pd=True)
    for n, ep in enumerate(eps[:2]):
        p.core.ledger.add(f"queued{n}", ep.address, 200_000, 30.0)
    request = RequestView("r", prompt_tokens=8_000, turn=0)
    with pytest.raises(Held):
        p.pick(request, "y" * 32_000, waited_s=0.0)
    p.core.ledger.remove("queued1")  # a prefill pod frees: it goes there
    pick = p.pick(request, "y" * 32_000, waited_s=0.0)
    assert pick.ledger_address == "10.0.1.2:8000" and pick.destination.startswith("10.0.2.")
