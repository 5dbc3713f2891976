"""Discovery: the standalone endpoint syntax, and the InferencePool v1 watch against kmock's API server."""

from __future__ import annotations

import asyncio
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import pytest
from kubernetes_asyncio import client

from smetric.epp.contracts import EndpointInfo
from smetric.epp.discovery.kubernetes import KubeDiscovery
from smetric.epp.discovery.pool import PoolSpec, PoolSpecError, pool_endpoints
from smetric.epp.discovery.standalone import EndpointSpecError, StaticDiscovery, parse_endpoints


def test_inline_endpoints_with_roles() -> None:
    eps = parse_endpoints("10.0.0.1:8000, 10.0.0.2:8000=prefill,[fd00::3]:8000=decode", kv_events_port=5557)
    assert [(e.address, e.role) for e in eps] == [
        ("10.0.0.1:8000", "prefill-decode"),
        ("10.0.0.2:8000", "prefill"),
        ("[fd00::3]:8000", "decode"),
    ]
    assert eps[0].kv_events_endpoint == "tcp://10.0.0.1:5557"
    assert eps[2].kv_events_endpoint == "tcp://[fd00::3]:5557"
    assert parse_endpoints("10.0.0.1:8000", kv_events_port=0)[0].kv_events_endpoint == ""


def test_endpoint_files(tmp_path: Path) -> None:
    txt = tmp_path / "eps.txt"
    txt.write_text("# pool\n10.0.0.1:8000\n10.0.0.2:8000=decode  # second\n\n")
    assert [e.address for e in parse_endpoints(f"@{txt}")] == ["10.0.0.1:8000", "10.0.0.2:8000"]
    yml = tmp_path / "eps.yaml"
    yml.write_text(
        "endpoints:\n"
        "  - 10.0.0.1:8000=prefill\n"
        "  - {address: 10.0.0.2:8000, role: decode, kv_events: 'tcp://10.0.0.2:6000', name: pod-b}\n"
    )
    eps = parse_endpoints(f"@{yml}")
    assert eps[0].role == "prefill"
    assert eps[1] == EndpointInfo("10.0.0.2:8000", "decode", "pod-b", "tcp://10.0.0.2:6000")


@pytest.mark.parametrize(
    ("spec", "match"),
    [
        ("10.0.0.1", "not ip:port"),
        ("host.example:8000", "not ip:port"),
        ("10.0.0.1:99999", "out of range"),
        ("10.0.0.1:8000=boss", "role"),
        ("10.0.0.1:8000,10.0.0.1:8000", "twice"),
        ("@/nonexistent/file", "does not exist"),
    ],
)
def test_bad_endpoint_specs_raise_clear_errors(spec: str, match: str) -> None:
    with pytest.raises(EndpointSpecError, match=match):
        parse_endpoints(spec)


def test_bad_yaml_entry(tmp_path: Path) -> None:
    yml = tmp_path / "eps.yml"
    yml.write_text("- {address: 10.0.0.1:8000, colour: red}\n")
    with pytest.raises(EndpointSpecError, match="bad endpoint"):
        parse_endpoints(f"@{yml}")


async def test_static_discovery_pushes_once() -> None:
    seen: list[Sequence[EndpointInfo]] = []
    d = StaticDiscovery.from_spec("10.0.0.1:8000")
    await d.start(seen.append)
    await d.stop()
    assert [[e.address for e in s] for s in seen] == [["10.0.0.1:8000"]]
    assert d.synced  # a fixed list is complete: the picker is ready at once


def _pool(labels: dict[str, str], ports: list[int]) -> dict[str, Any]:
    return {
        "apiVersion": "inference.networking.k8s.io/v1",
        "kind": "InferencePool",
        "metadata": {"name": "pool", "namespace": "ns"},
        "spec": {
            "selector": {"matchLabels": labels},
            "targetPorts": [{"number": p} for p in ports],
            "endpointPickerRef": {"name": "epp", "port": {"number": 9002}},
        },
    }


def _pod(name: str, ip: str, labels: dict[str, str], ready: bool = True) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": "ns", "labels": labels},
        "status": {
            "phase": "Running",
            "podIP": ip,
            "conditions": [{"type": "Ready", "status": "True" if ready else "False"}],
        },
    }


def test_pool_endpoints_pure() -> None:
    spec = PoolSpec.from_pool(_pool({"app": "vllm"}, [8000, 8001]))
    pods = [
        _pod("a", "10.1.0.1", {"app": "vllm", "llm-d.ai/role": "decode"}),
        _pod("b", "10.1.0.2", {"app": "vllm"}, ready=False),
        _pod("c", "10.1.0.3", {"app": "other"}),
        {
            **_pod("d", "10.1.0.4", {"app": "vllm"}),
            "metadata": {"name": "d", "labels": {"app": "vllm"}, "deletionTimestamp": "x"},
        },
    ]
    eps = pool_endpoints(spec, pods, 5557)
    assert [(e.address, e.role, e.pod_name) for e in eps] == [
        ("10.1.0.1:8000", "decode", "a"),
        ("10.1.0.1:8001", "decode", "a"),
    ]
    with pytest.raises(PoolSpecError):
        PoolSpec.from_pool({"metadata": {"name": "p"}, "spec": {"targetPorts": [{"number": 1}]}})


async def _until(cond: Any, what: str, timeout_s: float = 10.0) -> None:
    deadline = asyncio.get_running_loop().time() + timeout_s
    while not cond():
        if asyncio.get_running_loop().time() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.02)


async def test_kubernetes_watch_follows_pool_and_pods(kmock: Any) -> None:
    pools = "/apis/inference.networking.k8s.io/v1/namespaces/ns/inferencepools"
    pods = "/api/v1/namespaces/ns/pods"
    await kmock.post(pools, json=_pool({"app": "vllm"}, [8000]))
    await kmock.post(pods, json=_pod("a", "10.1.0.1", {"app": "vllm", "llm-d.ai/role": "prefill"}))
    await kmock.post(pods, json=_pod("other", "10.1.0.9", {"app": "web"}))

    async def factory() -> client.ApiClient:
        cfg = client.Configuration(host=str(kmock.url).rstrip("/"))
        return client.ApiClient(cfg)

    seen: list[list[str]] = []
    d = KubeDiscovery("pool", "ns", kv_events_port=5557, api_client=factory, resync_s=30, retry_s=0.1)
    assert not d.synced
    await d.start(lambda eps: seen.append([f"{e.address}/{e.role}" for e in eps]))
    try:
        assert seen[0] == ["10.1.0.1:8000/prefill"]
        assert d.synced  # pool and pods listed: readiness
        # a new Ready pod appears
        await kmock.post(pods, json=_pod("b", "10.1.0.2", {"app": "vllm"}))
        await _until(lambda: seen[-1] == ["10.1.0.1:8000/prefill", "10.1.0.2:8000/prefill-decode"], "pod b")
        # pod a stops being Ready
        await kmock.patch(
            f"{pods}/a", json={"status": {"conditions": [{"type": "Ready", "status": "False"}]}}
        )
        await _until(lambda: seen[-1] == ["10.1.0.2:8000/prefill-decode"], "pod a unready")
        # the pool gains a target port
        await kmock.patch(
            f"{pools}/pool", json={"spec": {"targetPorts": [{"number": 8000}, {"number": 9000}]}}
        )
        await _until(
            lambda: seen[-1] == ["10.1.0.2:8000/prefill-decode", "10.1.0.2:9000/prefill-decode"], "port"
        )
        # pod b deleted
        await kmock.delete(f"{pods}/b")
        await _until(lambda: seen[-1] == [], "pod b deleted")
        assert d.endpoints == ()
    finally:
        await d.stop()


async def test_kubernetes_pool_selector_change_and_missing_pool(kmock: Any) -> None:
    pools = "/apis/inference.networking.k8s.io/v1/namespaces/ns/inferencepools"
    pods = "/api/v1/namespaces/ns/pods"
    await kmock.post(pods, json=_pod("a", "10.1.0.1", {"app": "vllm"}))
    await kmock.post(pods, json=_pod("b", "10.1.0.2", {"app": "sglang"}))

    async def factory() -> client.ApiClient:
        return client.ApiClient(client.Configuration(host=str(kmock.url).rstrip("/")))

    seen: list[list[str]] = []
    d = KubeDiscovery("pool", "ns", api_client=factory, resync_s=30, retry_s=0.1)
    await d.start(lambda eps: seen.append([e.address for e in eps]))
    try:
        assert seen == [[]]  # no pool yet: no endpoints, no crash
        await kmock.post(pools, json=_pool({"app": "vllm"}, [8000]))
        await _until(lambda: seen[-1] == ["10.1.0.1:8000"], "pool created")
        await kmock.patch(f"{pools}/pool", json={"spec": {"selector": {"matchLabels": {"app": "sglang"}}}})
        await _until(lambda: seen[-1] == ["10.1.0.2:8000"], "selector changed")
        await kmock.delete(f"{pools}/pool")
        await _until(lambda: seen[-1] == [], "pool deleted")
    finally:
        await d.stop()


async def test_kubernetes_discovery_is_not_synced_while_the_api_is_down() -> None:
    """Readiness stays NOT_SERVING until a first complete listing; liveness does not care."""

    async def factory() -> client.ApiClient:
        return client.ApiClient(client.Configuration(host="http://127.0.0.1:1"))

    d = KubeDiscovery("pool", "ns", api_client=factory, resync_s=30, retry_s=0.1)
    seen: list[Sequence[EndpointInfo]] = []
    await d.start(seen.append)
    try:
        assert not d.synced and seen == [()]
    finally:
        await d.stop()
