"""smetric-tiered through the CRD and the operator: schema keys, rendering, the picker's parser."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from smetric.operator.render_picker import policy_config
from smetric.operator.spec import parse_spec
from smetric.policy import params_from_mapping
from smetric.policy.registry import POLICY_NAMES
from smetric.policy.tiered_params import SMetricTieredParams, TieredParams

ROOT = Path(__file__).resolve().parents[3]
CRDS = (
    ROOT / "crds" / "smetricpools.smetric.io.yaml",
    ROOT / "charts" / "smetric-operator" / "crds" / "smetricpools.smetric.io.yaml",
)


def _router_schema(path: Path) -> dict[str, Any]:
    crd = yaml.safe_load(path.read_text())
    schema: dict[str, Any] = crd["spec"]["versions"][0]["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema["properties"]["router"]["properties"]


def _camel(name: str) -> str:
    head, *rest = name.split("_")
    return head + "".join(w.capitalize() for w in rest)


def test_crd_lists_the_policy_and_every_tiered_parameter() -> None:
    fields = {_camel(name) for name in TieredParams.model_fields}
    for path in CRDS:
        router = _router_schema(path)
        assert (
            "smetric-tiered" in router["policy"]["enum"] and tuple(router["policy"]["enum"]) == POLICY_NAMES
        )
        keys = set(router["parameters"]["properties"]["tiered"]["properties"])
        assert keys == fields


def test_rendered_tiered_parameters_parse_in_the_picker() -> None:
    raw = {
        "model": {"name": "Qwen/Qwen3-Coder-30B-A3B-Instruct"},
        "topology": {"replicas": 4},
        "router": {
            "policy": "smetric-tiered",
            "parameters": {
                "tiered": {"globalAware": False, "footprintWindowS": 12.0, "globalCapacityTokens": 1000}
            },
        },
    }
    cfg = policy_config(parse_spec(raw))
    assert cfg["policy"]["name"] == "smetric-tiered"
    params = params_from_mapping(cfg["policy"]["parameters"])
    assert params.get(SMetricTieredParams).tiered == TieredParams(
        global_aware=False, footprint_window_s=12.0, global_capacity_tokens=1000
    )
