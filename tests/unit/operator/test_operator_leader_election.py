"""``router.leaderElection``: the operator renders upstream's opt-in HA mode (one active picker
through a Lease; smetric.epp.leader) besides the default active-active replicas."""

from __future__ import annotations

from typing import Any

import pytest

from smetric.operator.meta import PoolRef
from smetric.operator.render_picker import picker
from smetric.operator.spec import InvalidSpecError, parse_spec
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
