"""SMetricPool spec: the CRD schema (OpenAPI + CEL) and the operator's pydantic model agree."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from smetric.operator.spec import InvalidSpecError, SMetricPoolSpec, parse_spec, quantity_bytes
from smetric.policy.registry import POLICY_NAMES
from tests.support.operator_spec import (
    _crd,
    _spec_schema,
    _version,
    apply_defaults,
    minimal,
    validate_with_crd,
)

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = sorted((ROOT / "manifests" / "samples").glob("*.yaml"))


def _walk(schema: dict[str, Any], path: str = "spec") -> list[tuple[str, dict[str, Any]]]:
    out = [(path, schema)]
    for name, sub in schema.get("properties", {}).items():
        out += _walk(sub, f"{path}.{name}")
    if "items" in schema:
        out += _walk(schema["items"], f"{path}[]")
    return out


def test_crd_is_structural_with_status_and_printer_columns() -> None:
    crd = _crd()
    assert crd["spec"]["group"] == "smetric.io" and crd["spec"]["scope"] == "Namespaced"
    version = _version()
    assert version["name"] == "v1alpha1" and version["subresources"]["status"] == {}
    # scale subresource: kubectl scale / HPA on a colocated pool
    assert version["subresources"]["scale"] == {
        "specReplicasPath": ".spec.topology.replicas",
        "statusReplicasPath": ".status.readyReplicas",
        "labelSelectorPath": ".status.selector",
    }
    columns = {c["name"] for c in version["additionalPrinterColumns"]}
    assert {"Phase", "Policy", "Ready", "Desired", "Age"} <= columns
    for path, node in _walk(version["schema"]["openAPIV3Schema"]["properties"]["spec"]):
        assert "type" in node, f"{path} has no type (not structural)"


def test_crd_policy_enum_is_policy_names() -> None:
    assert tuple(_spec_schema()["properties"]["router"]["properties"]["policy"]["enum"]) == POLICY_NAMES


def test_crd_defaults_equal_pydantic_defaults() -> None:
    """A minimal CR defaulted by the CRD parses to the same spec as the minimal CR itself."""
    raw = minimal(gateway={"parentRef": {"name": "gw"}}, gpus={"rdma": {"resourceName": "rdma/ib"}})
    raw["router"] = {"parameters": {"costModel": {"cLinS": 1e-4, "cAttS": 1e-8}}}
    defaulted = apply_defaults(_spec_schema(), copy.deepcopy(raw))
    assert defaulted != raw  # the CRD did fill defaults in
    assert parse_spec(defaulted) == parse_spec(raw)


def test_every_crd_spec_field_is_known_to_the_model() -> None:
    """No CRD field the operator would silently ignore (pydantic forbids unknown fields)."""
    full = apply_defaults(_spec_schema(), minimal())
    parse_spec(full)  # raises on any field the model lacks


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.name)
def test_samples_validate(sample: Path) -> None:
    for doc in yaml.safe_load_all(sample.read_text()):
        if doc["kind"] != "SMetricPool":
            continue
        assert validate_with_crd(doc["spec"]) == []
        parse_spec(doc["spec"])


BAD_SPECS: dict[str, tuple[dict[str, Any], str]] = {
    "disaggregated-without-decode": (
        minimal(topology={"mode": "disaggregated", "prefill": {"replicas": 2}}),
        "requires topology.prefill.replicas and topology.decode.replicas",
    ),
    "colocated-without-replicas": (minimal(topology={"mode": "colocated"}), "requires topology.replicas"),
    "colocated-with-roles": (
        minimal(topology={"replicas": 1, "prefill": {"replicas": 1}, "decode": {"replicas": 1}}),
        "only valid with mode=disaggregated",
    ),
    "tp-not-dividing-gpus": (
        minimal(model={"name": "m", "tensorParallelSize": 3}, gpus={"countPerPod": 4}),
        "tensorParallelSize",
    ),
    "rdma-without-devices": (minimal(globalKV={"enabled": True, "protocol": "rdma"}), "deviceNames"),
    "async-load-without-mooncake-l2-adapter": (
        minimal(globalKV={"enabled": True, "loadMode": "async"}),
        "globalKV.loadMode=async renders LMCacheMPConnector",
    ),
    "role-tp-not-dividing-role-gpus": (  # TP and GPUs per role
        minimal(
            topology={
                "mode": "disaggregated",
                "prefill": {"replicas": 1},
                "decode": {"replicas": 1, "tensorParallelSize": 3, "gpusPerPod": 8},
            }
        ),
        "topology.decode",
    ),
    "approximate-index-on-several-pickers": (
        minimal(router={"prefixIndex": "approximate", "replicas": 2}),
        "router.replicas",
    ),
    "custom-engine-on-several-pickers": (  # a custom command defaults to the approximate index
        minimal(model={"name": "emu", "command": ["smetric", "emulate"]}, router={"replicas": 3}),
        "router.replicas",
    ),
}


@pytest.mark.parametrize("name", sorted(BAD_SPECS))
def test_cross_field_rules_agree_between_cel_and_operator(name: str) -> None:
    spec, fragment = BAD_SPECS[name]
    assert any(fragment in message for message in validate_with_crd(spec)), validate_with_crd(spec)
    with pytest.raises(InvalidSpecError, match=fragment.split()[0]):
        parse_spec(spec)


SCHEMA_ONLY_BAD: dict[str, dict[str, Any]] = {
    "unknown-policy": minimal(router={"policy": "fastest"}),
    "block-size-not-multiple-of-16": minimal(model={"name": "m", "blockSize": 24}),
    "bad-failure-mode": minimal(router={"failureMode": "Sometimes"}),
    "bad-quantity": minimal(globalKV={"segmentSize": "lots"}),
    "bad-gateway-provider": minimal(gateway={"parentRef": {"name": "g"}, "provider": "nginx"}),
    "bad-kv-cache-dtype": minimal(model={"name": "m", "kvCacheDtype": "int4"}),
    "hit-ratio-out-of-range": minimal(router={"parameters": {"hitRatio": 1.0}}),
    "bad-mode": minimal(topology={"mode": "pipelined", "replicas": 1}),
}


@pytest.mark.parametrize("name", sorted(SCHEMA_ONLY_BAD))
def test_bad_fields_rejected_by_crd_and_operator(name: str) -> None:
    spec = SCHEMA_ONLY_BAD[name]
    assert validate_with_crd(spec), "the CRD should reject this spec"
    with pytest.raises(InvalidSpecError):
        parse_spec(spec)


def test_invalid_spec_message_names_fields() -> None:
    with pytest.raises(InvalidSpecError) as err:
        parse_spec(minimal(router={"policy": "fastest"}, model={"name": "m", "blockSize": 24}))
    message = str(err.value)
    assert "router.policy='fastest' is not one of" in message
    assert "blockSize=24 must be a multiple of 16" in message


def test_non_mapping_and_missing_model_are_invalid() -> None:
    with pytest.raises(InvalidSpecError, match="mapping"):
        parse_spec(["not", "a", "spec"])
    with pytest.raises(InvalidSpecError, match="model"):
        parse_spec({"topology": {"replicas": 1}})


def test_defaults() -> None:
    spec = parse_spec(minimal())
    assert isinstance(spec, SMetricPoolSpec)
    assert spec.router.policy is None and spec.router.failure_mode == "FailClose"
    # no global KV tier by default: the no-tier default, smetric too since 5 Dec 2026 (docs/evidence.md)
    assert spec.routing_policy == "smetric"
    assert parse_spec({**minimal(), "router": {"policy": "lmetric"}}).routing_policy == "lmetric"
    assert parse_spec({**minimal(), "globalKV": {"enabled": True}}).routing_policy == "smetric"
    assert parse_spec({**minimal(), "router": {"policy": "smetric"}}).routing_policy == "smetric"
    assert spec.router.parameters.policy_owned == {}  # the policies' own defaults apply in the picker
    assert spec.gpus.products == ("NVIDIA-H20", "NVIDIA-H20-3e")
    assert spec.global_kv.master.rpc_port == 50051 and spec.global_kv.lmcache.chunk_size == 256
    assert spec.model.served == spec.model.name
    # the rendered vLLM publishes KV events: precise index on 2 pickers; a custom engine: 1 approximate
    assert (spec.prefix_index, spec.picker_replicas) == ("precise", 2)
    custom = parse_spec(minimal(model={"name": "emu", "command": ["smetric", "emulate"]}))
    assert (custom.prefix_index, custom.picker_replicas) == ("approximate", 1)


@pytest.mark.parametrize(
    ("text", "expected"),
    [("32Gi", 32 * 2**30), ("500M", 500 * 10**6), ("1.5Gi", int(1.5 * 2**30)), ("1024", 1024)],
)
def test_quantity_bytes(text: str, expected: int) -> None:
    assert quantity_bytes(text) == expected


@pytest.mark.parametrize("text", ["", "Gi", "12Xi", "1e3", "-4Gi"])
def test_quantity_bytes_rejects(text: str) -> None:
    with pytest.raises(ValueError, match="memory quantity"):
        quantity_bytes(text)
