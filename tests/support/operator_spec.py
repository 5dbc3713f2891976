"""The SMetricPool CRD as the API server applies it (OpenAPI validation, defaults, CEL rules), and a minimal spec."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import celpy
import jsonschema
import yaml

ROOT = Path(__file__).resolve().parents[2]
CRD_PATH = ROOT / "crds" / "smetricpools.smetric.io.yaml"


def _crd() -> dict[str, Any]:
    return yaml.safe_load(CRD_PATH.read_text())


def _version() -> dict[str, Any]:
    (version,) = _crd()["spec"]["versions"]
    return version


def _spec_schema() -> dict[str, Any]:
    schema: dict[str, Any] = _version()["schema"]["openAPIV3Schema"]["properties"]["spec"]
    return schema


def apply_defaults(schema: dict[str, Any], value: Any) -> Any:
    """What the API server does with OpenAPI ``default``s (structural schema, objects and arrays)."""
    if isinstance(value, dict) and "properties" in schema:
        for name, sub in schema["properties"].items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = apply_defaults(sub, value[name])
    if isinstance(value, list) and "items" in schema:
        return [apply_defaults(schema["items"], item) for item in value]
    return value


def validate_with_crd(spec: dict[str, Any]) -> list[str]:
    """OpenAPI validation + defaulting + CEL rules, as the API server would apply them."""
    schema = _spec_schema()
    errors = [e.message for e in jsonschema.Draft4Validator(schema).iter_errors(spec)]
    if errors:
        return errors
    defaulted = apply_defaults(schema, copy.deepcopy(spec))
    env = celpy.Environment()
    activation = {"self": celpy.json_to_cel(defaulted)}
    for rule in schema["x-kubernetes-validations"]:
        if not env.program(env.compile(rule["rule"])).evaluate(activation):
            errors.append(rule["message"])
    return errors


def minimal(**over: Any) -> dict[str, Any]:
    spec: dict[str, Any] = {
        "model": {"name": "Qwen/Qwen3-Coder-30B-A3B-Instruct"},
        "topology": {"replicas": 2},
    }
    spec.update(over)
    return spec
