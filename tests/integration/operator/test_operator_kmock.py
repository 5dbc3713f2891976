"""The real operator process (``smetric-operator run``) against kmock's Kubernetes API emulator.

kmock stores objects, serves list/watch/patch, and records every request. Two things a real
cluster does that kmock does not are added in :class:`Cluster` below and nothing more: server-side
apply creates a missing object (kmock's PATCH needs an existing one), and the garbage collector
deletes objects whose ownerReference points at a deleted owner. Deployment readiness is reported
by the test itself, standing in for the kubelet.
"""

from __future__ import annotations

import asyncio
import contextlib
import copy
import os
import signal
import subprocess
import sys
import time
import uuid
from collections.abc import AsyncIterator, Callable, Iterator
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import kmock
import pytest
import pytest_asyncio

pytestmark = pytest.mark.integration

NS = "team-a"
POOL = "qwen"
POOL_PATH = f"/apis/smetric.io/v1alpha1/namespaces/{NS}/smetricpools/{POOL}"
DEPLOYMENTS = f"/apis/apps/v1/namespaces/{NS}/deployments"

RESOURCES: dict[str, dict[str, Any]] = {
    "smetric.io/v1alpha1/smetricpools": {"kind": "SMetricPool", "subresources": ["status"]},
    "apps/v1/deployments": {"kind": "Deployment", "subresources": ["status"]},
    "v1/services": {"kind": "Service"},
    "v1/configmaps": {"kind": "ConfigMap"},
    "v1/serviceaccounts": {"kind": "ServiceAccount"},
    "v1/events": {"kind": "Event"},
    "rbac.authorization.k8s.io/v1/roles": {"kind": "Role"},
    "rbac.authorization.k8s.io/v1/rolebindings": {"kind": "RoleBinding"},
    "inference.networking.k8s.io/v1/inferencepools": {"kind": "InferencePool", "subresources": ["status"]},
    "gateway.networking.k8s.io/v1/httproutes": {"kind": "HTTPRoute", "subresources": ["status"]},
    "policy/v1/poddisruptionbudgets": {"kind": "PodDisruptionBudget"},
    "networking.k8s.io/v1/networkpolicies": {"kind": "NetworkPolicy"},
}
VERBS = {"get", "list", "watch", "create", "patch", "update", "delete"}
# What kopf itself discovers. The operator runs cluster-wide here: kmock 0.8 cannot parse the
# path /api/v1/namespaces, which kopf lists in single-namespace mode.
CLUSTER_RESOURCES: dict[str, dict[str, Any]] = {
    "v1/namespaces": {"kind": "Namespace"},
    "apiextensions.k8s.io/v1/customresourcedefinitions": {"kind": "CustomResourceDefinition"},
}


@attrs.define(kw_only=True)
class Cluster(kmock.KubernetesEmulator):
    """kmock plus server-side-apply upserts and owner-reference garbage collection."""

    applies: list[tuple[str, str, dict[str, str]]] = attrs.field(factory=list)

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        content_type = request.headers.get("Content-Type", "")
        if request.resource is not None and request.method == "PATCH" and "apply-patch" in content_type:
            self.applies.append((request.resource.plural or "", request.name or "", dict(request.params)))
            key = (request.resource, request.namespace, request.name)
            async with self._lock:
                if key not in self._objects or self._objects[key].deleted:
                    body = copy.deepcopy(request.data)
                    body["metadata"]["uid"] = str(uuid.uuid4())
                    if key in self._objects:
                        self._objects[key].create(body)
                    else:
                        self._objects[key] = body
                    await self._buses[request.resource].put(
                        {"type": "ADDED", "object": self._objects[key].raw}
                    )
        response = await super()._handle(request)
        if request.method in ("DELETE", "PATCH", "POST") and request.resource is not None:
            await self._collect_garbage()  # like the real collector: dangling owners are collected
        return response

    async def _collect_garbage(self) -> None:
        async with self._lock:
            live_uids = {obj.raw["metadata"].get("uid") for obj in self._objects.values() if not obj.deleted}
            for (resource, _, _), obj in list(self._objects.items()):
                if obj.deleted:
                    continue
                owners = {ref["uid"] for ref in obj.raw["metadata"].get("ownerReferences") or []}
                if owners and not owners & live_uids:
                    raw = obj.raw
                    obj.delete()
                    await self._buses[resource].put({"type": "DELETED", "object": raw})

    def live(self, plural: str) -> dict[str, dict[str, Any]]:
        return {
            name: obj.raw
            for (res, ns, name), obj in self._objects.items()
            if res.plural == plural and ns == NS and not obj.deleted
        }


@pytest.fixture
def kmock_options() -> dict[str, Any]:
    return {"cls": Cluster}


@pytest_asyncio.fixture
async def cluster(kmock: Cluster) -> Cluster:
    for key, info in RESOURCES.items():
        kmock.resources[key] = kmock.ResourceInfo(namespaced=True, verbs=VERBS, **info)
    for key, info in CLUSTER_RESOURCES.items():
        kmock.resources[key] = kmock.ResourceInfo(namespaced=False, verbs=VERBS, **info)
    return kmock


@contextlib.contextmanager
def run_operator(cluster: Cluster, log_path: Path, scope: list[str]) -> Iterator[subprocess.Popen[bytes]]:
    """The operator against ``cluster`` (``scope``: ``--all-namespaces`` or ``--namespace NS``), its
    log in ``log_path``; stopped by SIGINT on exit, which fails on a traceback in its log."""
    log = log_path.open("wb")
    proc = subprocess.Popen(
        [
            sys.executable,
            "-m",
            "smetric.operator.cli",
            "run",
            "--api-server",
            str(cluster.url).rstrip("/"),
            *scope,
        ],
        stdout=log,
        stderr=subprocess.STDOUT,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )
    try:
        yield proc
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(timeout=10)
        except subprocess.TimeoutExpired:
            proc.kill()
            proc.wait()
        log.close()
        text = log_path.read_text(errors="replace")
        print(text[-6000:])  # shown by pytest when the test fails
        assert "Traceback" not in text, text[-4000:]


@pytest_asyncio.fixture
async def operator(cluster: Cluster, tmp_path: Path) -> AsyncIterator[subprocess.Popen[bytes]]:
    with run_operator(cluster, tmp_path / "operator.log", ["--all-namespaces"]) as proc:
        yield proc


async def eventually(check: Callable[[], Any], what: str, timeout_s: float = 30.0) -> Any:
    deadline = time.monotonic() + timeout_s
    while True:
        result = check()
        if result:
            return result
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.1)


def pool_body(spec: dict[str, Any]) -> dict[str, Any]:
    return {
        "apiVersion": "smetric.io/v1alpha1",
        "kind": "SMetricPool",
        "metadata": {"name": POOL, "namespace": NS, "uid": str(uuid.uuid4()), "generation": 1},
        "spec": spec,
    }


VALID_SPEC: dict[str, Any] = {
    "model": {"name": "Qwen/Qwen3-Coder-30B-A3B-Instruct"},
    "topology": {"mode": "colocated", "replicas": 2},
    "globalKV": {"enabled": True},
    "gateway": {"parentRef": {"name": "gw"}},
}
EXPECTED_CHILDREN = {
    "deployments": {"qwen-prefill-decode", "qwen-epp", "qwen-mooncake-master"},
    "services": {
        "qwen-epp",
        "qwen-epp-peers",
        "qwen-mooncake-master",
    },  # peers: the replicas share follow-ups
    "configmaps": {"qwen-epp-config"},
    "serviceaccounts": {"qwen-epp"},
    "roles": {"qwen-epp"},
    "rolebindings": {"qwen-epp"},
    "inferencepools": {"qwen"},
    "httproutes": {"qwen"},
    "poddisruptionbudgets": {"qwen-prefill-decode", "qwen-epp"},  # the picker runs 2 replicas by default
    "networkpolicies": {"qwen-endpoint-picker", "qwen-model-server", "qwen-mooncake-master"},
}


def pool_status(cluster: Cluster) -> dict[str, Any]:
    return cluster.live("smetricpools").get(POOL, {}).get("status") or {}


def condition(cluster: Cluster, kind: str) -> dict[str, Any]:
    return next((c for c in pool_status(cluster).get("conditions", []) if c["type"] == kind), {})


def children(cluster: Cluster) -> dict[str, set[str]]:
    return {plural: set(cluster.live(plural)) for plural in EXPECTED_CHILDREN}


async def mark_ready(cluster: Cluster) -> None:
    """Stand in for the kubelet: every Deployment reports all replicas ready; and for the gateway
    controller: the HTTPRoute and InferencePool report Accepted and ResolvedRefs in status.parents."""
    for name, dep in cluster.live("deployments").items():
        replicas = dep["spec"]["replicas"]
        status = {"status": {"replicas": replicas, "readyReplicas": replicas, "availableReplicas": replicas}}
        async with cluster.patch(f"{DEPLOYMENTS}/{name}/status", json=status) as resp:
            assert resp.status == 200
    conditions = [{"type": t, "status": "True", "reason": t} for t in ("Accepted", "ResolvedRefs")]
    parents = {"status": {"parents": [{"parentRef": {"name": "gw"}, "conditions": conditions}]}}
    for path in (
        f"/apis/gateway.networking.k8s.io/v1/namespaces/{NS}/httproutes/{POOL}/status",
        f"/apis/inference.networking.k8s.io/v1/namespaces/{NS}/inferencepools/{POOL}/status",
    ):
        async with cluster.patch(path, json=parents) as resp:
            assert resp.status == 200


async def test_lifecycle(cluster: Cluster, operator: subprocess.Popen[bytes]) -> None:
    async with cluster.post(
        f"/apis/smetric.io/v1alpha1/namespaces/{NS}/smetricpools", json=pool_body(VALID_SPEC)
    ) as resp:
        assert resp.status == 200

    # Create -> every child applied with server-side apply, owned by the pool.
    await eventually(lambda: children(cluster) == EXPECTED_CHILDREN, "children applied")
    assert all(
        params["fieldManager"] == "smetric-operator" and params["force"].lower() == "true"
        for _, _, params in cluster.applies
    )
    uid = cluster.live("smetricpools")[POOL]["metadata"]["uid"]
    for plural in EXPECTED_CHILDREN:
        for obj in cluster.live(plural).values():
            assert obj["metadata"]["ownerReferences"][0]["uid"] == uid
    await eventually(lambda: pool_status(cluster).get("phase") == "Progressing", "phase Progressing")
    assert condition(cluster, "Ready")["status"] == "False"

    # Deployments report ready -> pool Ready, per-role replicas, observedGeneration.
    await mark_ready(cluster)
    await eventually(lambda: pool_status(cluster).get("phase") == "Ready", "phase Ready")
    status = pool_status(cluster)
    assert status["replicas"]["prefill-decode"] == {"ready": 2, "desired": 2}
    assert status["endpoints"] == 2 and status["inferencePool"] == POOL and status["observedGeneration"] == 1
    assert condition(cluster, "Ready")["status"] == "True"
    assert condition(cluster, "InvalidSpec")["status"] == "False"

    # Spec change (scale) -> only the engine Deployment is re-applied.
    await asyncio.sleep(1.0)  # let the events of the readiness update settle
    before = len(cluster.applies)
    scaled = {"spec": {"topology": {"replicas": 3}}, "metadata": {"generation": 2}}
    async with cluster.patch(POOL_PATH, json=scaled) as resp:
        assert resp.status == 200
    await eventually(
        lambda: cluster.live("deployments")["qwen-prefill-decode"]["spec"]["replicas"] == 3, "scale applied"
    )
    await asyncio.sleep(1.0)
    assert {name for _, name, _ in cluster.applies[before:]} == {"qwen-prefill-decode"}
    await eventually(lambda: pool_status(cluster).get("phase") == "Progressing", "Progressing after scale-up")
    assert pool_status(cluster)["replicas"]["prefill-decode"] == {"ready": 2, "desired": 3}

    # A deleted child is re-created.
    async with cluster.delete(f"/api/v1/namespaces/{NS}/configmaps/qwen-epp-config") as resp:
        assert resp.status == 200
    await eventually(lambda: "qwen-epp-config" in cluster.live("configmaps"), "configmap re-created")

    # A child no longer rendered is pruned (global KV tier switched off).
    async with cluster.patch(POOL_PATH, json={"spec": {"globalKV": {"enabled": False}}}) as resp:
        assert resp.status == 200
    await eventually(
        lambda: (
            not {"qwen-mooncake-master"} & (set(cluster.live("deployments")) | set(cluster.live("services")))
        ),
        "mooncake master pruned",
    )

    # Pool deleted -> the garbage collector removes the children; the operator re-creates nothing.
    async with cluster.delete(POOL_PATH) as resp:
        assert resp.status == 200
    await asyncio.sleep(2.0)
    assert all(not names for names in children(cluster).values()), (
        children(cluster),
        cluster.live("smetricpools"),
    )
    assert operator.poll() is None


async def test_invalid_spec_sets_condition_and_applies_nothing(
    cluster: Cluster, operator: subprocess.Popen[bytes]
) -> None:
    bad = {"model": {"name": "m"}, "topology": {"mode": "disaggregated", "prefill": {"replicas": 2}}}
    async with cluster.post(
        f"/apis/smetric.io/v1alpha1/namespaces/{NS}/smetricpools", json=pool_body(bad)
    ) as resp:
        assert resp.status == 200
    await eventually(
        lambda: condition(cluster, "InvalidSpec").get("status") == "True", "InvalidSpec condition"
    )
    message = condition(cluster, "InvalidSpec")["message"]
    assert "disaggregated requires topology.prefill.replicas and topology.decode.replicas" in message
    assert pool_status(cluster)["phase"] == "Invalid"
    await asyncio.sleep(3.0)  # no retry storm: nothing applied, the status written once
    assert cluster.applies == []
    assert all(not names for names in children(cluster).values())
    status_patches = [r for r in cluster if r.method == "PATCH" and r.subresource == "status"]
    assert len(status_patches) == 1

    # Fixing the spec converges to the full set of children.
    fix = {"spec": {"topology": {"decode": {"replicas": 1}}}}
    async with cluster.patch(POOL_PATH, json=fix) as resp:
        assert resp.status == 200
    want = {
        **EXPECTED_CHILDREN,
        "deployments": {"qwen-prefill", "qwen-decode", "qwen-epp"},
        "services": {"qwen-epp", "qwen-epp-peers"},
        # 2 prefill replicas and 2 pickers; 1 decode replica gets none
        "poddisruptionbudgets": {"qwen-prefill", "qwen-epp"},
        "networkpolicies": {"qwen-endpoint-picker", "qwen-model-server"},
    }
    want.pop("httproutes")
    await eventually(lambda: {k: v for k, v in children(cluster).items() if v} == want, "children after fix")
    await eventually(
        lambda: condition(cluster, "InvalidSpec").get("status") == "False", "InvalidSpec cleared"
    )


async def test_a_helm_owned_inference_pool_is_not_taken_over(
    cluster: Cluster, operator: subprocess.Popen[bytes]
) -> None:
    """A same-named InferencePool of a Helm release stays as Helm wrote it (no apply with force over
    it) and the pool's Degraded condition says why; with adoptExisting the operator takes it over."""
    helm_pool = {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {
            "name": POOL,
            "namespace": NS,
            "labels": {"app.kubernetes.io/managed-by": "Helm"},
            "annotations": {"meta.helm.sh/release-name": "qwen", "meta.helm.sh/release-namespace": NS},
        },
        "spec": {"selector": {"matchLabels": {"app": "vllm-qwen"}}, "targetPorts": [{"number": 8000}]},
    }
    async with cluster.post(
        f"/apis/inference.networking.k8s.io/v1/namespaces/{NS}/inferencepools", json=helm_pool
    ) as resp:
        assert resp.status == 200
    async with cluster.post(
        f"/apis/smetric.io/v1alpha1/namespaces/{NS}/smetricpools", json=pool_body(VALID_SPEC)
    ) as resp:
        assert resp.status == 200

    await eventually(lambda: condition(cluster, "Degraded").get("reason") == "NotOwned", "NotOwned condition")
    message = condition(cluster, "Degraded")["message"]
    assert f"InferencePool/{POOL} exists and is not managed by this pool (Helm release {NS}/qwen" in message
    assert pool_status(cluster)["phase"] == "Degraded"
    await eventually(lambda: children(cluster)["httproutes"] == {POOL}, "the other children applied")
    assert not [name for plural, name, _ in cluster.applies if plural == "inferencepools"]
    live = cluster.live("inferencepools")[POOL]
    assert live["spec"]["selector"] == helm_pool["spec"]["selector"] and not live["metadata"].get(
        "ownerReferences"
    )

    async with cluster.patch(POOL_PATH, json={"spec": {"adoptExisting": True}}) as resp:
        assert resp.status == 200
    await eventually(
        lambda: cluster.live("inferencepools")[POOL]["metadata"].get("ownerReferences"), "pool adopted"
    )
    uid = cluster.live("smetricpools")[POOL]["metadata"]["uid"]
    assert cluster.live("inferencepools")[POOL]["metadata"]["ownerReferences"][0]["uid"] == uid
    await eventually(lambda: condition(cluster, "Degraded").get("reason") != "NotOwned", "NotOwned cleared")
