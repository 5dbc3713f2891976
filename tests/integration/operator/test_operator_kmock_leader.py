"""``router.leaderElection`` through the real operator process on kmock (the harness of
``test_operator_kmock``): the pool becomes Ready with one ready picker, the leader, while its standby
is never Ready and the Deployment controller reports ProgressDeadlineExceeded; a picker rollout (a
policy change) is rendered with Recreate, so it finishes: the old pods go, the new leader comes up,
the pool is Ready again. The test stands in for the kubelet and the Deployment controller."""

from __future__ import annotations

import asyncio
import subprocess
from typing import Any

from tests.integration.operator.test_operator_kmock import (
    DEPLOYMENTS,
    EXPECTED_CHILDREN,
    NS,
    POOL,
    POOL_PATH,
    VALID_SPEC,
    Cluster,
    children,
    cluster,
    condition,
    eventually,
    kmock_options,
    mark_ready,
    operator,
    pool_body,
    pool_status,
)

__all__ = ["cluster", "kmock_options", "operator"]  # fixtures used by name

EPP = f"{POOL}-epp"
# The Deployment controller's verdict on a Deployment whose standby never becomes available.
DEADLINE = {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded"}


async def set_picker(cluster: Cluster, ready: int, deadline_exceeded: bool) -> None:
    replicas = cluster.live("deployments")[EPP]["spec"]["replicas"]
    status = {
        "replicas": replicas,
        "readyReplicas": ready,
        "availableReplicas": ready,
        "conditions": [DEADLINE] if deadline_exceeded else [],
    }
    async with cluster.patch(f"{DEPLOYMENTS}/{EPP}/status", json={"status": status}) as resp:
        assert resp.status == 200


def picker_template(cluster: Cluster) -> dict[str, Any]:
    return dict(cluster.live("deployments")[EPP]["spec"]["template"])


async def test_leader_elected_pool_becomes_ready_and_rolls_out(
    cluster: Cluster, operator: subprocess.Popen[bytes]
) -> None:
    spec = {**VALID_SPEC, "router": {"leaderElection": True}}
    async with cluster.post(
        f"/apis/smetric.io/v1alpha1/namespaces/{NS}/smetricpools", json=pool_body(spec)
    ) as resp:
        assert resp.status == 200
    await eventually(lambda: children(cluster) == EXPECTED_CHILDREN, "children applied")
    picker = cluster.live("deployments")[EPP]["spec"]
    assert picker["replicas"] == 2 and picker["strategy"] == {"type": "Recreate"}

    # Every engine ready, the leader ready, its standby not (by design), the controller's deadline hit.
    await mark_ready(cluster)
    await set_picker(cluster, ready=1, deadline_exceeded=True)
    # mark_ready made both pickers ready first: wait for the status that reflects 1 of 2
    await eventually(
        lambda: (
            pool_status(cluster).get("phase") == "Ready"
            and pool_status(cluster).get("replicas", {}).get("endpoint-picker") == {"ready": 1, "desired": 2}
        ),
        "phase Ready with the leader alone",
    )
    assert condition(cluster, "Ready")["status"] == "True"
    assert condition(cluster, "Degraded")["status"] == "False"

    # A policy change rolls the picker: the new template is applied, Recreate removes every old pod
    # (no leader for a moment: Progressing), the new leader comes up: Ready again.
    await asyncio.sleep(1.0)
    before = picker_template(cluster)
    change = {
        "spec": {"router": {"leaderElection": True, "policy": "lmetric"}},
        "metadata": {"generation": 2},
    }
    async with cluster.patch(POOL_PATH, json=change) as resp:
        assert resp.status == 200
    await eventually(lambda: picker_template(cluster) != before, "picker template re-applied")
    assert cluster.live("deployments")[EPP]["spec"]["strategy"] == {"type": "Recreate"}
    await set_picker(cluster, ready=0, deadline_exceeded=False)
    await eventually(lambda: pool_status(cluster).get("phase") == "Progressing", "no leader during Recreate")
    assert "(leader)" in condition(cluster, "Ready")["message"]
    await set_picker(cluster, ready=1, deadline_exceeded=False)
    await eventually(lambda: pool_status(cluster).get("phase") == "Ready", "Ready with the new leader")
    assert pool_status(cluster)["observedGeneration"] == 2

    # The leader lost and the deadline passed: Degraded, as for any Deployment that cannot progress.
    await set_picker(cluster, ready=0, deadline_exceeded=True)
    await eventually(lambda: pool_status(cluster).get("phase") == "Degraded", "Degraded without a leader")
    assert "progress deadline exceeded" in condition(cluster, "Degraded")["message"]
    assert operator.poll() is None
