"""``router.leaderElection``: the operator renders upstream's opt-in HA mode (one active picker
through a Lease; smetric.epp.leader) besides the default active-active replicas."""

from __future__ import annotations

from typing import Any

import pytest

from smetric.operator.meta import PoolRef
from smetric.operator.render_picker import picker
from smetric.operator.spec import InvalidSpecError, parse_spec
from smetric.operator.status import pool_status
from tests.support.operator_spec import minimal, validate_with_crd

POOL = PoolRef("pool", "ns", "uid")


def _kinds(spec: dict[str, Any]) -> dict[str, Any]:
    return {m["kind"]: m for m in picker(POOL, parse_spec(spec))}


def test_leader_election_renders_the_flag_the_lease_rights_and_the_holder_name() -> None:
    out = _kinds(minimal(router={"leaderElection": True}))
    pod = out["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert "--ha-enable-leader-election=true" in pod["args"]
    assert {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}} in pod["env"]
    assert {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "create", "update", "patch"],
    } in out["Role"]["rules"]
    assert out["Deployment"]["spec"]["replicas"] == 2


def test_active_active_by_default_needs_no_lease() -> None:
    out = _kinds(minimal())
    pod = out["Deployment"]["spec"]["template"]["spec"]["containers"][0]
    assert not any(a.startswith("--ha-enable-leader-election") for a in pod["args"])
    assert all("coordination.k8s.io" not in r["apiGroups"] for r in out["Role"]["rules"])


def test_several_approximate_pickers_are_allowed_when_one_leads() -> None:
    spec = minimal(router={"prefixIndex": "approximate", "replicas": 2, "leaderElection": True})
    assert validate_with_crd(spec) == []
    assert parse_spec(spec).picker_replicas == 2
    # a custom engine (approximate index) with leader election gets a standby by default
    custom = minimal(
        model={"name": "emu", "command": ["smetric", "emulate"]}, router={"leaderElection": True}
    )
    assert parse_spec(custom).picker_replicas == 2
    without = minimal(router={"prefixIndex": "approximate", "replicas": 2})
    assert any("router.leaderElection" in m for m in validate_with_crd(without))
    with pytest.raises(InvalidSpecError, match=r"router\.leaderElection=true"):
        parse_spec(without)


def test_leader_election_rolls_out_with_recreate() -> None:
    """A rolling update with maxUnavailable 0 never finishes under leader election: the surge pod
    stands by (the old leader holds the Lease), is never Ready, so the old leader is never removed.
    Upstream's chart uses Recreate (GIE v1.5.0 config/charts/epplib/templates/_deployment.yaml 12-19)."""
    elected = _kinds(minimal(router={"leaderElection": True, "replicas": 3}))["Deployment"]["spec"]
    assert elected["replicas"] == 3 and elected["strategy"] == {"type": "Recreate"}
    active = _kinds(minimal(router={"replicas": 3}))["Deployment"]["spec"]
    assert active["strategy"]["type"] == "RollingUpdate"


def _picker(replicas: int) -> dict[str, Any]:
    labels = {"app.kubernetes.io/component": "endpoint-picker"}
    return {
        "kind": "Deployment",
        "metadata": {"name": "p-epp", "labels": labels},
        "spec": {"replicas": replicas},
    }


def _live(ready: int, deadline_exceeded: bool = False) -> dict[str, Any]:
    conditions = (
        [{"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}]
        if deadline_exceeded
        else []
    )
    return {"metadata": {"name": "p-epp"}, "status": {"readyReplicas": ready, "conditions": conditions}}


def _status(ready: int, deadline_exceeded: bool, elected: bool) -> dict[str, Any]:
    return pool_status(
        "p",
        [_picker(2)],
        {"p-epp": _live(ready, deadline_exceeded)},
        1,
        [],
        "t",
        leader_elected=("p-epp",) if elected else (),
    )


def test_a_leader_elected_picker_is_ready_with_its_leader() -> None:
    """Standbys are never Ready by design (only the leader passes readiness: GIE v1.5.0
    cmd/epp/runner/health.go 59-72), and the Deployment controller then reports
    ProgressDeadlineExceeded: neither keeps the pool from Ready."""
    status = _status(ready=1, deadline_exceeded=True, elected=True)
    assert status["phase"] == "Ready", status["conditions"]
    assert status["replicas"]["endpoint-picker"] == {"ready": 1, "desired": 2}
    # no leader: waiting, and the deadline is a failure again
    assert _status(ready=0, deadline_exceeded=False, elected=True)["phase"] == "Progressing"
    lost = _status(ready=0, deadline_exceeded=True, elected=True)
    assert lost["phase"] == "Degraded" and "progress deadline exceeded" in str(lost["conditions"])
    # active-active pickers still need every replica
    assert _status(ready=1, deadline_exceeded=False, elected=False)["phase"] == "Progressing"
    assert _status(ready=1, deadline_exceeded=True, elected=False)["phase"] == "Degraded"
