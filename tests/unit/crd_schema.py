"""Validation of custom-resource manifests against the CRD schemas in ``crd_schemas/`` (taken from
upstream at the versions docs/deploy.md pins; ``crd_schemas/extract.py`` says how).

A CRD's ``openAPIV3Schema`` is a structural schema: an object with ``properties`` and no
``x-kubernetes-preserve-unknown-fields`` has no other fields, and the API server refuses an unknown
field on server-side apply. :func:`to_json_schema` turns it into a JSON schema with that rule
(``additionalProperties: false``), ``nullable`` and ``x-kubernetes-int-or-string`` spelled in JSON
schema terms. CEL rules (``x-kubernetes-validations``) are not evaluated here.
"""

from __future__ import annotations

import json
from functools import cache
from pathlib import Path
from typing import Any

import jsonschema

SCHEMAS = Path(__file__).resolve().parent / "crd_schemas"
_KEYWORDS = (
    "enum",
    "pattern",
    "minLength",
    "maxLength",
    "minimum",
    "maximum",
    "exclusiveMinimum",
    "exclusiveMaximum",
    "minItems",
    "maxItems",
    "minProperties",
    "maxProperties",
    "required",
    "uniqueItems",
)


def to_json_schema(node: dict[str, Any]) -> dict[str, Any]:
    """A JSON schema (draft 2020-12 keywords) equivalent to a structural ``openAPIV3Schema`` node."""
    out: dict[str, Any] = {k: node[k] for k in _KEYWORDS if k in node}
    if node.get("x-kubernetes-int-or-string"):
        out["type"] = ["integer", "string"]
    elif "type" in node:
        out["type"] = [node["type"], "null"] if node.get("nullable") else node["type"]
    for combinator in ("anyOf", "oneOf", "allOf"):
        if combinator in node:
            out[combinator] = [to_json_schema(n) for n in node[combinator]]
    if "not" in node:
        out["not"] = to_json_schema(node["not"])
    if "items" in node:
        out["items"] = to_json_schema(node["items"])
    if "properties" in node:
        out["properties"] = {k: to_json_schema(v) for k, v in node["properties"].items()}
    if isinstance(node.get("additionalProperties"), dict):
        out["additionalProperties"] = to_json_schema(node["additionalProperties"])
    elif (
        node.get("type") == "object"
        and "properties" in node
        and not node.get("x-kubernetes-preserve-unknown-fields")
    ):
        out["additionalProperties"] = False
    return out


@cache
def _schemas() -> dict[tuple[str, str], tuple[dict[str, Any], dict[str, str]]]:
    """``(apiVersion, kind) -> (JSON schema, source)`` for every file in ``crd_schemas/``."""
    found: dict[tuple[str, str], tuple[dict[str, Any], dict[str, str]]] = {}
    for path in sorted(SCHEMAS.glob("*.json")):
        data = json.loads(path.read_text())
        schema = to_json_schema(data["openAPIV3Schema"])
        schema["properties"]["apiVersion"] = {"const": data["apiVersion"]}
        schema["properties"]["kind"] = {"const": data["kind"]}
        schema["properties"].setdefault("metadata", {"type": "object"})  # implied at every root
        schema["required"] = sorted({*schema.get("required", ()), "apiVersion", "kind", "metadata"})
        found[(data["apiVersion"], data["kind"])] = (schema, data["source"])
    return found


def known_kinds() -> set[str]:
    return {kind for _, kind in _schemas()}


def source_of(kind: str) -> dict[str, str]:
    (source,) = [src for (_, k), (_, src) in _schemas().items() if k == kind]
    return source


def validate_crd(manifest: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` unless the manifest fits its kind's pinned CRD schema;
    ``KeyError`` for a kind or apiVersion without one (a render of a version nobody pinned)."""
    key = (manifest.get("apiVersion", ""), manifest.get("kind", ""))
    if key not in _schemas():
        raise KeyError(f"no pinned CRD schema for {key[0]} {key[1]}")
    schema, _ = _schemas()[key]
    jsonschema.validate(manifest, schema, cls=jsonschema.Draft202012Validator)
