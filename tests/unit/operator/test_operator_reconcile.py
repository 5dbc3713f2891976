"""Reconcile() and status computation against a hand-written in-memory API (unit level)."""

from __future__ import annotations

import copy
import logging
from typing import Any, cast

import pytest

from smetric.operator.client import ApiError, KubeClient
from smetric.operator.meta import SPEC_HASH_ANNOTATION
from smetric.operator.reconcile import ChildApplyError, ChildNotOwnedError, Outcome, reconcile
from smetric.operator.status import Condition, merge_conditions, pool_status

LOG = logging.getLogger("test")
UID = "11111111-2222-4333-8444-555555555555"


class FakeApi:
    """Stores objects by (apiVersion, kind, name); records applies, deletes and status patches."""

    def __init__(self) -> None:
        self.objects: dict[tuple[str, str, str], dict[str, Any]] = {}
        self.applied: list[str] = []
        self.deleted: list[str] = []
        self.statuses: list[dict[str, Any]] = []
        self.pools: list[dict[str, Any]] = []

    async def list(
        self, api_version: str, kind: str, namespace: str, label_selector: str
    ) -> list[dict[str, Any]]:
        if kind == "SMetricPool":  # the route-conflict check lists the namespace's pools
            return [copy.deepcopy(p) for p in self.pools]
        assert "smetric.io/pool=p" in label_selector
        return [
            copy.deepcopy(o)
            for (v, k, _), o in self.objects.items()
            if (v, k) == (api_version, kind)
            and (o["metadata"].get("labels") or {}).get("smetric.io/pool") == "p"
        ]

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> dict[str, Any] | None:
        obj = self.objects.get((api_version, kind, name))
        return copy.deepcopy(obj) if obj is not None else None

    async def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
        key = (manifest["apiVersion"], manifest["kind"], manifest["metadata"]["name"])
        self.applied.append(f"{key[1]}/{key[2]}")
        old_status = self.objects.get(key, {}).get("status")
        self.objects[key] = copy.deepcopy(manifest)
        if old_status is not None:
            self.objects[key]["status"] = old_status
        return copy.deepcopy(self.objects[key])

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        self.deleted.append(f"{kind}/{name}")
        self.objects.pop((api_version, kind, name), None)

    async def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: dict[str, Any]
    ) -> None:
        self.statuses.append(status)


async def run(api: FakeApi, body: dict[str, Any]) -> Outcome:
    return await reconcile(cast(KubeClient, api), body, LOG)


def pool(spec: dict[str, Any], generation: int = 1, status: dict[str, Any] | None = None) -> dict[str, Any]:
    return {
        "metadata": {"name": "p", "namespace": "ns", "uid": UID, "generation": generation},
        "spec": spec,
        "status": status or {},
    }


SPEC: dict[str, Any] = {"model": {"name": "m"}, "topology": {"replicas": 2}}


async def test_first_reconcile_applies_everything_then_nothing() -> None:
    api = FakeApi()
    first = await run(api, pool(SPEC))
    # 8 core children + 2 PodDisruptionBudgets (engines, picker) + 2 NetworkPolicies (picker, engines)
    # + the picker replicas' peers Service
    assert len(first.applied) == 13 and first.deleted == ()
    assert first.status["phase"] == "Progressing"
    api.applied.clear()
    second = await run(api, pool(SPEC, status=dict(first.status)))
    assert second.applied == () and api.applied == []
    assert len(api.statuses) == 1  # unchanged status is not rewritten


async def test_only_changed_children_are_reapplied_and_orphans_pruned() -> None:
    api = FakeApi()
    # an explicit policy: without one, dropping the global tier also changes the picker's default
    router = {"policy": "llmd-slo"}
    await run(api, pool({**SPEC, "router": router, "globalKV": {"enabled": True}}))
    api.applied.clear()
    outcome = await run(api, pool({**SPEC, "router": router, "topology": {"replicas": 3}}, generation=2))
    assert outcome.applied == ("Deployment/p-prefill-decode",)
    assert sorted(outcome.deleted) == [
        "Deployment/p-mooncake-master",
        "NetworkPolicy/p-mooncake-master",
        "Service/p-mooncake-master",
    ]


async def test_objects_not_owned_by_this_pool_are_left_alone() -> None:
    api = FakeApi()
    stranger = {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "p-old", "ownerReferences": [{"uid": "other"}]},
    }
    api.objects[("v1", "ConfigMap", "p-old")] = stranger
    outcome = await run(api, pool(SPEC))
    assert outcome.deleted == () and ("v1", "ConfigMap", "p-old") in api.objects


HELM_POOL = {
    "apiVersion": "inference.networking.k8s.io/v1",
    "kind": "InferencePool",
    "metadata": {
        "name": "p",
        "namespace": "ns",
        "labels": {"app.kubernetes.io/managed-by": "Helm"},
        "annotations": {"meta.helm.sh/release-name": "vllm-qwen", "meta.helm.sh/release-namespace": "ns"},
        "managedFields": [{"manager": "helm", "operation": "Update"}],
    },
    "spec": {"selector": {"matchLabels": {"app": "vllm"}}},
}


async def test_a_same_named_object_of_someone_else_is_not_taken_over() -> None:
    """A Helm release's InferencePool and a Service of another controller keep their spec; the
    status says which objects were left alone and who holds them."""
    api = FakeApi()
    api.objects[("inference.networking.k8s.io/v1", "InferencePool", "p")] = copy.deepcopy(HELM_POOL)
    other_service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {
            "name": "p-epp",
            "ownerReferences": [{"kind": "Deployment", "name": "x", "uid": "u-x", "controller": True}],
        },
    }
    api.objects[("v1", "Service", "p-epp")] = copy.deepcopy(other_service)
    spec = {**SPEC, "gateway": {"parentRef": {"name": "gw"}}}
    with pytest.raises(ChildNotOwnedError, match="InferencePool/p"):  # retried later, not at once
        await run(api, pool(spec))
    assert "InferencePool/p" not in api.applied and "Service/p-epp" not in api.applied
    assert "HTTPRoute/p" in api.applied  # the rest of the pool is applied
    assert api.objects[("inference.networking.k8s.io/v1", "InferencePool", "p")] == HELM_POOL
    assert api.objects[("v1", "Service", "p-epp")] == other_service
    status = api.statuses[-1]
    assert status["phase"] == "Degraded"
    cond = {c["type"]: c for c in status["conditions"]}
    assert cond["Degraded"]["status"] == "True" and cond["Degraded"]["reason"] == "NotOwned"
    message = cond["Degraded"]["message"]
    assert "InferencePool/p exists and is not managed by this pool (Helm release ns/vllm-qwen" in message
    assert "field managers helm" in message
    assert "Service/p-epp exists and is not managed by this pool (controller Deployment/x" in message
    assert cond["Ready"]["status"] == "False"


async def test_adopt_existing_takes_the_objects_over() -> None:
    api = FakeApi()
    api.objects[("inference.networking.k8s.io/v1", "InferencePool", "p")] = copy.deepcopy(HELM_POOL)
    outcome = await run(api, pool({**SPEC, "adoptExisting": True}))
    assert "InferencePool/p" in outcome.applied
    adopted = api.objects[("inference.networking.k8s.io/v1", "InferencePool", "p")]
    assert adopted["metadata"]["ownerReferences"][0]["uid"] == UID
    cond = {c["type"]: c for c in outcome.status["conditions"]}
    assert cond["Degraded"]["reason"] != "NotOwned"


async def test_an_object_this_pool_owns_without_its_labels_is_reapplied() -> None:
    """Owned (ownerReference with the pool's uid) but relabelled: not listed, still the pool's."""
    api = FakeApi()
    await run(api, pool(SPEC))
    api.objects[("v1", "ConfigMap", "p-epp-config")]["metadata"]["labels"] = {}
    api.applied.clear()
    outcome = await run(api, pool(SPEC))
    assert "ConfigMap/p-epp-config" in api.applied
    assert all(c["reason"] != "NotOwned" for c in outcome.status["conditions"])


async def test_tampered_hash_is_reapplied() -> None:
    api = FakeApi()
    await run(api, pool(SPEC))
    api.objects[("v1", "ConfigMap", "p-epp-config")]["metadata"]["annotations"][SPEC_HASH_ANNOTATION] = (
        "stale"
    )
    api.applied.clear()
    outcome = await run(api, pool(SPEC))
    assert outcome.applied == ("ConfigMap/p-epp-config",)


async def test_invalid_spec_applies_nothing_and_reports() -> None:
    api = FakeApi()
    bad = {"model": {"name": "m", "blockSize": 24}, "topology": {"replicas": 1}}
    outcome = await run(api, pool(bad))
    assert api.applied == [] and api.deleted == []
    assert outcome.invalid is not None and "multiple of 16" in outcome.invalid
    (status,) = api.statuses
    assert status["phase"] == "Invalid"
    cond = {c["type"]: c for c in status["conditions"]}
    assert cond["InvalidSpec"]["status"] == "True" and "multiple of 16" in cond["InvalidSpec"]["message"]
    assert cond["Ready"]["status"] == "False"
    # Same invalid spec again: status unchanged, not rewritten (no write storm).
    await run(api, pool(bad, status=status))
    assert len(api.statuses) == 1


async def test_ready_when_deployments_report_ready() -> None:
    api = FakeApi()
    await run(api, pool(SPEC))
    for (_, kind, _), obj in api.objects.items():
        if kind == "Deployment":
            obj["status"] = {"readyReplicas": obj["spec"]["replicas"]}
    outcome = await run(api, pool(SPEC))
    assert outcome.status["phase"] == "Ready"
    assert outcome.status["replicas"] == {
        "prefill-decode": {"ready": 2, "desired": 2},
        "endpoint-picker": {"ready": 2, "desired": 2},
    }
    assert outcome.status["readyReplicas"] == 2 and outcome.status["desiredReplicas"] == 2


def _deployment(
    name: str, replicas: int, component: str = "model-server", role: str | None = "prefill-decode"
) -> dict[str, Any]:
    labels = {"app.kubernetes.io/component": component}
    if role:
        labels["llm-d.ai/role"] = role
    return {
        "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {"replicas": replicas},
    }


def test_pool_status_degraded_on_replica_failure() -> None:
    rendered = [_deployment("p-prefill-decode", 2)]
    live = {
        "p-prefill-decode": {
            "metadata": {"name": "p-prefill-decode"},
            "status": {
                "readyReplicas": 1,
                "conditions": [{"type": "ReplicaFailure", "status": "True", "message": "quota"}],
            },
        }
    }
    status = pool_status("p", rendered, live, 3, [], "2026-01-01T00:00:00Z")
    assert status["phase"] == "Degraded"
    cond = {c["type"]: c for c in status["conditions"]}
    assert cond["Degraded"]["status"] == "True" and "quota" in cond["Degraded"]["message"]
    assert all(c["observedGeneration"] == 3 for c in status["conditions"])


def test_pool_status_missing_deployment_counts_zero_ready() -> None:
    status = pool_status("p", [_deployment("p-prefill-decode", 4)], {"p-prefill-decode": None}, 1, [], "t")
    assert status["replicas"]["prefill-decode"] == {"ready": 0, "desired": 4}
    assert status["phase"] == "Progressing" and status["endpoints"] == 0


def test_transition_time_kept_while_status_unchanged() -> None:
    first = merge_conditions([], [Condition("Ready", False, "R", "m")], 1, "t1")
    same = merge_conditions(first, [Condition("Ready", False, "R2", "m2")], 2, "t2")
    flipped = merge_conditions(same, [Condition("Ready", True, "R", "")], 3, "t3")
    assert same[0]["lastTransitionTime"] == "t1" and same[0]["reason"] == "R2"
    assert flipped[0]["lastTransitionTime"] == "t3"


async def test_a_refused_child_does_not_block_the_others() -> None:
    """E.g. the InferencePool CRD is not installed: the rest is applied, the pool is Degraded."""

    class NoInferencePools(FakeApi):
        async def apply(self, manifest: dict[str, Any]) -> dict[str, Any]:
            if manifest["kind"] == "InferencePool":
                raise ApiError(404, "PATCH", "/apis/inference.networking.k8s.io/v1/...", "not found")
            return await super().apply(manifest)

    api = NoInferencePools()
    with pytest.raises(ChildApplyError, match="InferencePool/p"):
        await run(api, pool(SPEC))
    assert "Deployment/p-prefill-decode" in api.applied and len(api.applied) == 12
    (status,) = api.statuses
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert status["phase"] == "Degraded" and degraded["reason"] == "ApplyFailed"
    assert "InferencePool/p" in degraded["message"]


def _route_status(accepted: str, resolved: str) -> dict[str, Any]:
    conditions = [
        {
            "type": "Accepted",
            "status": accepted,
            "reason": "Accepted" if accepted == "True" else "NotAllowed",
        },
        {"type": "ResolvedRefs", "status": resolved, "reason": "ResolvedRefs"},
    ]
    return {"parents": [{"parentRef": {"name": "gw"}, "controllerName": "x", "conditions": conditions}]}


async def test_ready_needs_the_gateway_to_accept_the_route_and_the_pool() -> None:
    """Status.parents (Accepted, ResolvedRefs) of the HTTPRoute and InferencePool."""
    api = FakeApi()
    raw = {**SPEC, "gateway": {"parentRef": {"name": "gw"}}}
    await run(api, pool(raw))
    for key, obj in api.objects.items():  # every Deployment ready
        if key[1] == "Deployment":
            want = obj["spec"].get("replicas", 1)
            obj["status"] = {"readyReplicas": want, "replicas": want}
    waiting = await run(api, pool(raw))
    cond = {c["type"]: c for c in waiting.status["conditions"]}
    assert waiting.status["phase"] == "Progressing" and cond["Ready"]["status"] == "False"
    assert cond["GatewayAccepted"]["reason"] == "WaitingForGateway"
    assert "HTTPRoute: not accepted yet" in cond["GatewayAccepted"]["message"]
    for kind in ("HTTPRoute", "InferencePool"):
        obj = next(o for k, o in api.objects.items() if k[1] == kind)
        obj["status"] = _route_status("True", "True")
    ready = await run(api, pool(raw))
    assert ready.status["phase"] == "Ready"
    assert ready.status["gateway"]["httpRoute"] == {
        "reported": True,
        "accepted": True,
        "resolvedRefs": True,
        "message": "",
    }
    next(o for k, o in api.objects.items() if k[1] == "HTTPRoute")["status"] = _route_status("False", "True")
    rejected = await run(api, pool(raw))
    assert rejected.status["phase"] == "Degraded"
    assert rejected.status["selector"] == "smetric.io/pool=p,app.kubernetes.io/component=model-server"


async def test_two_pools_on_one_gateway_and_path_are_flagged() -> None:
    """Routes that would catch each other's traffic make the pool Degraded."""
    api = FakeApi()
    raw = {**SPEC, "gateway": {"parentRef": {"name": "gw"}}}
    api.pools = [
        {
            "metadata": {"name": "q"},
            "spec": {
                "model": {"name": "other"},
                "topology": {"replicas": 1},
                "gateway": {"parentRef": {"name": "gw"}},
            },
        }
    ]
    outcome = await run(api, pool(raw))
    degraded = next(c for c in outcome.status["conditions"] if c["type"] == "Degraded")
    assert outcome.status["phase"] == "Degraded" and degraded["reason"] == "RouteConflict"
    assert "SMetricPool q" in degraded["message"] and "matchModelHeader" in degraded["message"]
    # Both matching the model header for different models: told apart, no conflict.
    api.pools[0]["spec"]["gateway"]["matchModelHeader"] = True
    raw["gateway"] = {"parentRef": {"name": "gw"}, "matchModelHeader": True}
    fine = await run(api, pool(raw))
    assert next(c for c in fine.status["conditions"] if c["type"] == "Degraded")["status"] == "False"
    # Distinct paths: no conflict either.
    api.pools[0]["spec"]["gateway"] = {"parentRef": {"name": "gw"}, "path": "/b"}
    raw["gateway"] = {"parentRef": {"name": "gw"}, "path": "/a"}
    assert (await run(api, pool(raw))).status["phase"] != "Degraded"


async def test_client_limits_are_owned_pruned_and_never_taken_over() -> None:
    """gateway.clientLimits' ClientTrafficPolicy is a child like the others: applied, pruned when
    switched off, and an object of that name held by someone else (the platform team's own
    policy) is left alone with a NotOwned status."""
    api = FakeApi()
    gateway = {"parentRef": {"name": "gw"}, "provider": "envoy-gateway"}
    key = ("gateway.envoyproxy.io/v1alpha1", "ClientTrafficPolicy", "p-client-limits")
    await run(api, pool({**SPEC, "gateway": gateway}))
    assert "ClientTrafficPolicy/p-client-limits" in api.applied
    assert api.objects[key]["metadata"]["ownerReferences"][0]["uid"] == UID
    off = {**gateway, "clientLimits": {"enabled": False}}
    outcome = await run(api, pool({**SPEC, "gateway": off}, generation=2))
    assert outcome.deleted == ("ClientTrafficPolicy/p-client-limits",) and key not in api.objects
    theirs = {"apiVersion": key[0], "kind": key[1], "metadata": {"name": key[2], "namespace": "ns"}}
    api.objects[key] = copy.deepcopy(theirs)
    api.applied.clear()
    with pytest.raises(ChildNotOwnedError, match="ClientTrafficPolicy/p-client-limits"):
        await run(api, pool({**SPEC, "gateway": gateway}, generation=3))
    assert api.objects[key] == theirs and "ClientTrafficPolicy/p-client-limits" not in api.applied
