"""Every ``SMetricPool`` spec field changes what the operator renders when it leaves its default.

A field that the CRD accepts and documents but that no renderer reads is a half-made change: the
user sets it and nothing happens. For each leaf field of :class:`SMetricPoolSpec` this test tries
values of the field's type (a few candidates, the first the spec accepts) on several base pools
(colocated and P/D, with and without the global tier and a gateway) and requires that at least
one changes the rendered objects. Fields that by design change no rendered object are listed in
``NOT_RENDERED`` with the reason.
"""

from __future__ import annotations

import copy
import json
import types
import typing
from collections.abc import Iterator
from typing import Any

import pytest
from pydantic import BaseModel
from pydantic.fields import FieldInfo

from smetric.operator.spec import InvalidSpecError, SMetricPoolSpec, parse_spec
from tests.support.operator_render import render

NOT_RENDERED: dict[str, str] = {
    "adoptExisting": "read by the reconciler (whether it takes over objects it does not own), not by a renderer",
    "globalKV.lmcache.mooncakeL2Adapter": "declares that the engine image carries LMCache's mooncake_store L2 "
    "adapter; it only admits globalKV.loadMode=async (spec validation), which then renders the async connector",
}
# Fields whose other values need a companion change to be valid: the variant spec is given whole
# (a dotted path -> (base, the change merged into it at the top level)).
COMPANIONS: dict[str, tuple[str, dict[str, object]]] = {
    "topology.mode": (
        "colocated",
        {"topology": {"mode": "disaggregated", "prefill": {"replicas": 1}, "decode": {"replicas": 1}}},
    ),
    "globalKV.loadMode": (
        "colocated+tier+gateway",
        {"globalKV": {"enabled": True, "loadMode": "async", "lmcache": {"mooncakeL2Adapter": True}}},
    ),
}
# str fields with a closed set of values the type does not state
STR_VALUES_OF: dict[str, tuple[str, ...]] = {"router.policy": ("round-robin", "smetric")}

_COMMON: dict[str, Any] = {
    "model": {
        "name": "Qwen/Qwen3-Coder-30B-A3B-Instruct",
        "storage": {"claimName": "models"},
        "hfTokenSecret": {"name": "hf"},
    },
    "gpus": {"countPerPod": 4, "rdma": {"resourceName": "rdma/ib"}},
    "router": {"parameters": {"costModel": {"cLinS": 1e-4, "cAttS": 1e-9}}},
}
BASES: dict[str, dict[str, Any]] = {
    "colocated": {**_COMMON, "topology": {"replicas": 4}},
    "colocated+tier+gateway": {
        **_COMMON,
        "topology": {"replicas": 4},
        "globalKV": {"enabled": True, "deviceNames": ["mlx5_0"]},
        "gateway": {"parentRef": {"name": "gw"}, "provider": "envoy-gateway"},
    },
    "pd+tier+gateway": {
        **_COMMON,
        "topology": {"mode": "disaggregated", "prefill": {"replicas": 1}, "decode": {"replicas": 2}},
        "router": {**_COMMON["router"], "flowControl": {"enabled": True}},
        "globalKV": {"enabled": True, "deviceNames": ["mlx5_0"]},
        "gateway": {"parentRef": {"name": "gw"}, "provider": "istio"},
    },
}

_LIST_VALUES: dict[str, tuple[dict[str, Any], ...]] = {
    "env": ({"name": "SMETRIC_TEST", "value": "1"},),
    "volumes": ({"name": "scratch", "emptyDir": {}},),
    "volumeMounts": ({"name": "scratch", "mountPath": "/scratch"},),
    "tolerations": ({"key": "k", "operator": "Exists"},),
    "imagePullSecrets": ({"name": "pull"},),
}
_DICT_VALUES: dict[str, dict[str, Any]] = {
    "resources": {"limits": {"cpu": "3", "memory": "3Gi"}, "requests": {"cpu": "3", "memory": "3Gi"}},
    "affinity": {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": {
                "nodeSelectorTerms": [{"matchExpressions": [{"key": "k", "operator": "Exists"}]}]
            }
        }
    },
}
_STR_VALUES = ("other-name", "17Gi", "/other", "registry.example/image:2", "mlx5_1", "gw-ns", "7")


def _inner(annotation: Any) -> Any:
    args = [a for a in typing.get_args(annotation) if a is not type(None)]
    optional = typing.get_origin(annotation) in (typing.Union, types.UnionType)
    return args[0] if optional and len(args) == 1 else annotation


def _leaves(model: type[BaseModel], prefix: tuple[str, ...] = ()) -> Iterator[tuple[tuple[str, ...], Any]]:
    for name, field in model.model_fields.items():
        path = (*prefix, field.alias or name)
        inner = _inner(field.annotation)
        if isinstance(inner, type) and issubclass(inner, BaseModel):
            yield from _leaves(inner, path)
        else:
            yield path, inner


def _current(raw: dict[str, Any], path: tuple[str, ...]) -> Any:
    value: Any = parse_spec(raw).model_dump(by_alias=True, mode="json")
    for key in path:
        value = value.get(key) if isinstance(value, dict) else None
    return value


def _candidates(path: tuple[str, ...], annotation: Any, current: Any) -> list[Any]:
    origin = typing.get_origin(annotation)
    if annotation is bool:
        return [not current] if isinstance(current, bool) else [True, False]
    if origin is typing.Literal:
        return [v for v in typing.get_args(annotation) if v != current]
    if annotation is int:
        whole = current if isinstance(current, int) else 0
        return [whole + 1, whole + 16, whole * 2, 1, 2, 3, 16, 32768]
    if annotation is float:
        real = float(current) if isinstance(current, float | int) else 0.0
        return [real * 0.5, real * 2, real + 0.05, 0.5, 0.9, 1e-6, 2.0]
    if annotation is str:
        return list(STR_VALUES_OF.get(".".join(path), _STR_VALUES))
    if origin is tuple:
        (item, *_rest) = typing.get_args(annotation)
        if item is str:
            return [("--smetric-test",), ("mlx5_1",), ("NVIDIA-H200",)]
        return [_LIST_VALUES[path[-1]]]
    if origin is dict:
        _key, value = typing.get_args(annotation)
        return [{"k": "v"}] if value is str else [_DICT_VALUES[path[-1]]]
    raise AssertionError(f"no candidate values for {'.'.join(path)}: {annotation}")


def _with(raw: dict[str, Any], path: tuple[str, ...], value: Any) -> dict[str, Any]:
    out = copy.deepcopy(raw)
    node = out
    for key in path[:-1]:
        node = node.setdefault(key, {})
    node[path[-1]] = list(value) if isinstance(value, tuple) else value
    return out


def _rendered(raw: dict[str, Any]) -> str:
    return json.dumps(render(raw), sort_keys=True, default=str)


LEAVES = list(_leaves(SMetricPoolSpec))
BASELINES = {name: _rendered(raw) for name, raw in BASES.items()}


def _changes_rendering(path: tuple[str, ...], annotation: Any) -> list[str]:
    """The bases on which a value of this field changed the rendered objects (empty: none did)."""
    changed = []
    for name, raw in BASES.items():
        current = _current(raw, path)
        for value in _candidates(path, annotation, current):
            try:
                rendered = _rendered(_with(raw, path, value))
            except (InvalidSpecError, ValueError):
                continue  # the spec refuses this value here: try the next
            if rendered != BASELINES[name]:
                changed.append(name)
                break
    return changed


@pytest.mark.parametrize(("path", "annotation"), LEAVES, ids=[".".join(p) for p, _ in LEAVES])
def test_spec_field_changes_what_is_rendered(path: tuple[str, ...], annotation: Any) -> None:
    dotted = ".".join(path)
    if dotted in COMPANIONS:
        base, change = COMPANIONS[dotted]
        assert _rendered({**BASES[base], **change}) != BASELINES[base], f"{dotted} changes no rendered object"
        return
    changed = _changes_rendering(path, annotation)
    if dotted in NOT_RENDERED:
        assert not changed, (
            f"{dotted} is listed as not rendered but changes {changed}: remove it from NOT_RENDERED"
        )
    else:
        assert changed, (
            f"spec field {dotted} changes no rendered object on any base pool ({', '.join(BASES)})"
        )


def test_every_field_is_found() -> None:
    assert len(LEAVES) > 100
    assert all(isinstance(f, FieldInfo) for f in SMetricPoolSpec.model_fields.values())
