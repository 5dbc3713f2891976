"""Shared by the renderer tests: minimal schemas of the CRD kinds kubernetes-validate does not
know, ``validate``, the spec variants and small accessors of rendered objects."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import jsonschema
import kubernetes_validate

from smetric.operator.meta import PoolRef
from smetric.operator.render import render_children
from smetric.operator.spec import parse_spec

ROOT = Path(__file__).resolve().parents[2]
K8S_VERSION = "1.33.0"
POOL = PoolRef(name="p", namespace="ns", uid="0c0ffee0-0000-4000-8000-000000000001")

# Minimal schemas for the CRD kinds kubernetes-validate does not know, from protocols.md's facts
# about InferencePool v1 and the Gateway API HTTPRoute v1 fields the renderer uses.
_STR = {"type": "string", "minLength": 1}
INFERENCE_POOL_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "inference.networking.k8s.io/v1"},
        "kind": {"const": "InferencePool"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["selector", "targetPorts", "endpointPickerRef"],
            "properties": {
                "selector": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["matchLabels"],
                    "properties": {
                        "matchLabels": {
                            "type": "object",
                            "minProperties": 1,
                            "maxProperties": 64,
                            "additionalProperties": {"type": "string"},
                        }
                    },
                },
                "targetPorts": {
                    "type": "array",
                    "minItems": 1,
                    "maxItems": 8,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["number"],
                        "properties": {"number": {"type": "integer", "minimum": 1, "maximum": 65535}},
                    },
                },
                "appProtocol": {"enum": ["http", "kubernetes.io/h2c"]},
                "endpointPickerRef": {
                    "type": "object",
                    "additionalProperties": False,
                    "required": ["name", "port"],
                    "properties": {
                        "group": {"const": ""},
                        "kind": {"const": "Service"},
                        "name": _STR,
                        "port": {
                            "type": "object",
                            "additionalProperties": False,
                            "required": ["number"],
                            "properties": {"number": {"type": "integer", "minimum": 1, "maximum": 65535}},
                        },
                        "failureMode": {"enum": ["FailOpen", "FailClose"]},
                    },
                },
            },
        },
    },
}
HTTP_ROUTE_SCHEMA: dict[str, Any] = {
    "type": "object",
    "required": ["apiVersion", "kind", "metadata", "spec"],
    "properties": {
        "apiVersion": {"const": "gateway.networking.k8s.io/v1"},
        "kind": {"const": "HTTPRoute"},
        "spec": {
            "type": "object",
            "additionalProperties": False,
            "required": ["parentRefs", "rules"],
            "properties": {
                "parentRefs": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "required": ["name"],
                        "properties": {
                            "group": {"const": "gateway.networking.k8s.io"},
                            "kind": {"const": "Gateway"},
                            "name": _STR,
                            "namespace": _STR,
                        },
                    },
                },
                "hostnames": {"type": "array", "items": _STR},
                "rules": {
                    "type": "array",
                    "minItems": 1,
                    "items": {
                        "type": "object",
                        "additionalProperties": False,
                        "properties": {
                            "matches": {"type": "array"},
                            "timeouts": {"type": "object"},
                            "backendRefs": {
                                "type": "array",
                                "minItems": 1,
                                "items": {
                                    "type": "object",
                                    "additionalProperties": False,
                                    "required": ["group", "kind", "name"],
                                    "properties": {
                                        "group": {"const": "inference.networking.k8s.io"},
                                        "kind": {"const": "InferencePool"},
                                        "name": _STR,
                                    },
                                },
                            },
                        },
                    },
                },
            },
        },
    },
}


def validate(manifest: dict[str, Any]) -> None:
    kind = manifest["kind"]
    if kind == "InferencePool":
        jsonschema.validate(manifest, INFERENCE_POOL_SCHEMA)
    elif kind == "HTTPRoute":
        jsonschema.validate(manifest, HTTP_ROUTE_SCHEMA)
    else:
        kubernetes_validate.validate(manifest, K8S_VERSION, strict=True)


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
