"""Shared by the renderer tests: ``validate`` (Kubernetes schemas, and the pinned CRD schemas for
the custom kinds), the spec variants and small accessors of rendered objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import kubernetes_validate

from smetric.operator.meta import PoolRef
from smetric.operator.render import render_children
from smetric.operator.spec import parse_spec
from tests.support.crd_schema import known_kinds, validate_crd

ROOT = Path(__file__).resolve().parents[2]
K8S_VERSION = "1.33.0"
POOL = PoolRef(name="p", namespace="ns", uid="0c0ffee0-0000-4000-8000-000000000001")
# the picker config's flowControl a default pool renders (docs/overload.md, section 8), spelled out
DEFAULT_FLOW_CONTROL: dict[str, Any] = {
    "enabled": True,
    "maxQueued": 1024,
    "ttlS": 2.0,
    "shedOnDeadline": True,
    "retryAfterS": 5.0,
    "slack": 1.0,
    "maxEngineWaiting": 0,
    "kvHeadroom": True,
    "lateLast": True,
    "tpotGuard": True,
    "filterCandidates": False,
    "hopelessLast": True,
    "sessionMissShare": 0.0,
    "sessionWindow": 20,
    "sessionIdleS": 60.0,
}


def validate(manifest: dict[str, Any], k8s_version: str = K8S_VERSION) -> None:
    """Custom resources against their pinned CRD schema (``crd_schema``), everything else against
    the Kubernetes schemas of ``k8s_version`` (strict: unknown fields fail)."""
    if manifest["kind"] in known_kinds():
        validate_crd(manifest)
    else:
        kubernetes_validate.validate(manifest, k8s_version, strict=True)


def spec(**over: Any) -> dict[str, Any]:
    raw: dict[str, Any] = {
        "model": {"name": "Qwen/Qwen3-Coder-30B-A3B-Instruct"},
        "topology": {"replicas": 4},
    }
    raw.update(over)
    return raw


def render(raw: dict[str, Any]) -> list[dict[str, Any]]:
    return render_children(POOL, parse_spec(raw))


def by_name(children: list[dict[str, Any]], kind: str, name: str) -> dict[str, Any]:
    found = [c for c in children if c["kind"] == kind and c["metadata"]["name"] == name]
    assert len(found) == 1, f"{kind}/{name} rendered {len(found)} times"
    return found[0]


def container(deployment: dict[str, Any], name: str = "vllm") -> dict[str, Any]:
    pod = deployment["spec"]["template"]["spec"]
    (c,) = [c for c in pod["containers"] + pod.get("initContainers", []) if c["name"] == name]
    return c


def env(c: dict[str, Any]) -> dict[str, Any]:
    return {e["name"]: e.get("value", e.get("valueFrom")) for e in c["env"]}


def flag(args: list[str], name: str) -> str:
    return args[args.index(name) + 1]


VARIANTS: dict[str, dict[str, Any]] = {
    "colocated": spec(),
    "colocated-global-kv-rdma": spec(
        globalKV={"enabled": True, "protocol": "rdma", "deviceNames": ["mlx5_0"]},
        gpus={"countPerPod": 2, "rdma": {"resourceName": "rdma/ib"}},
        gateway={"parentRef": {"name": "gw"}, "hostnames": ["llm.example.com"]},
    ),
    "disaggregated-nixl": spec(
        topology={"mode": "disaggregated", "prefill": {"replicas": 2}, "decode": {"replicas": 3}}
    ),
    "disaggregated-mooncake-global-kv": spec(
        topology={
            "mode": "disaggregated",
            "prefill": {"replicas": 1},
            "decode": {"replicas": 1},
            "pdConnector": "mooncake",
        },
        globalKV={"enabled": True},
        router={"prefixIndex": "precise", "failureMode": "FailOpen", "resources": {"requests": {"cpu": "2"}}},
    ),
    "cpu-emulator": spec(
        model={"name": "emu", "command": ["smetric", "emulate"], "extraArgs": ["--port=8000"]},
        gpus={"countPerPod": 0, "products": []},
    ),
}
