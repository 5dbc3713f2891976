"""Validation of custom-resource manifests against the CRD schemas in ``crd_schemas/`` (taken from
upstream at the versions docs/deploy.md pins; ``crd_schemas/extract.py`` says how).

A CRD's ``openAPIV3Schema`` is a structural schema: an object with ``properties`` and no
``x-kubernetes-preserve-unknown-fields`` has no other fields, and the API server refuses an unknown
field on server-side apply. :func:`to_json_schema` turns it into a JSON schema with that rule
(``additionalProperties: false``), ``nullable`` and ``x-kubernetes-int-or-string`` spelled in JSON
schema terms. Then, as the API server does, the schema's defaults are applied and every CEL rule
(``x-kubernetes-validations``) of a field present in the object is evaluated (``cel-python``;
transition rules, those using ``oldSelf``, only apply to updates and are skipped); a rule that is
false or fails to evaluate (e.g. it reads an absent field) is a validation error.
"""

from __future__ import annotations

import copy
import json
from dataclasses import dataclass
from functools import cache
from pathlib import Path
from typing import Any

import celpy
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


# CEL names an object property that is a CEL reserved word ``__word__`` (Kubernetes CEL escaping).
_CEL_RESERVED = frozenset(
    [
        "true",
        "false",
        "null",
        "in",
        "as",
        "break",
        "const",
        "continue",
        "else",
        "for",
        "function",
        "if",
        "import",
        "let",
        "loop",
        "package",
        "namespace",
        "return",
        "var",
        "void",
        "while",
    ]
)


def _cel_name(key: str) -> str:
    if key in _CEL_RESERVED:
        return f"__{key}__"
    for raw, escaped in (("__", "__underscores__"), (".", "__dot__"), ("-", "__dash__"), ("/", "__slash__")):
        key = key.replace(raw, escaped)
    return key


def _cel_value(value: Any) -> Any:
    if isinstance(value, dict):
        return {_cel_name(k): _cel_value(v) for k, v in value.items()}
    if isinstance(value, list):
        return [_cel_value(v) for v in value]
    return value


def apply_defaults(node: dict[str, Any], value: Any) -> Any:
    """The object as the API server stores it: schema ``default``s filled in where a field is absent."""
    if isinstance(value, dict):
        for name, sub in node.get("properties", {}).items():
            if name not in value and "default" in sub:
                value[name] = copy.deepcopy(sub["default"])
            if name in value:
                value[name] = apply_defaults(sub, value[name])
        if isinstance(node.get("additionalProperties"), dict):
            for name in value:
                value[name] = apply_defaults(node["additionalProperties"], value[name])
    if isinstance(value, list) and "items" in node:
        return [apply_defaults(node["items"], item) for item in value]
    return value


@cache
def _cel_program(expr: str) -> Any:
    """A compiled CEL rule (compiling is the slow part; the CRDs repeat their rules)."""
    env = celpy.Environment()
    return env.program(env.compile(expr))


def cel_violations(node: dict[str, Any], value: Any, path: str = "") -> list[str]:
    """Messages of the CEL rules on ``node`` and below that ``value`` (already defaulted) breaks."""
    if value is None:
        return []
    out: list[str] = []
    for rule in node.get("x-kubernetes-validations", []):
        expr = rule["rule"]
        if "oldSelf" in expr:
            continue
        try:
            result = _cel_program(expr).evaluate({"self": celpy.json_to_cel(_cel_value(value))})
        except (celpy.CELParseError, celpy.CELEvalError) as exc:
            result = exc
        if isinstance(result, Exception) or not bool(result):
            out.append(f"{path or '<root>'}: {rule.get('message') or expr} ({expr})")
    if isinstance(value, dict):
        for name, sub in node.get("properties", {}).items():
            out += cel_violations(sub, value.get(name), f"{path}.{name}")
        if isinstance(node.get("additionalProperties"), dict):
            for name, item in value.items():
                out += cel_violations(node["additionalProperties"], item, f"{path}.{name}")
    if isinstance(value, list) and "items" in node:
        for i, item in enumerate(value):
            out += cel_violations(node["items"], item, f"{path}[{i}]")
    return out


@dataclass(frozen=True, slots=True)
class PinnedCrd:
    json_schema: dict[str, Any]
    structural: dict[str, Any]  # the openAPIV3Schema as taken from the CRD (defaults, CEL rules)
    source: dict[str, str]


def load_crd(path: Path) -> PinnedCrd:
    """One file written by ``crd_schemas/extract.py``."""
    data = json.loads(path.read_text())
    schema = to_json_schema(data["openAPIV3Schema"])
    schema["properties"]["apiVersion"] = {"const": data["apiVersion"]}
    schema["properties"]["kind"] = {"const": data["kind"]}
    schema["properties"].setdefault("metadata", {"type": "object"})  # implied at every root
    schema["required"] = sorted({*schema.get("required", ()), "apiVersion", "kind", "metadata"})
    return PinnedCrd(schema, data["openAPIV3Schema"], data["source"])


@cache
def _schemas() -> dict[tuple[str, str], PinnedCrd]:
    """``(apiVersion, kind) -> PinnedCrd`` for the pinned versions (``crd_schemas/*.json``; later
    versions checked for forward compatibility live in ``crd_schemas/later/``)."""
    found: dict[tuple[str, str], PinnedCrd] = {}
    for path in sorted(SCHEMAS.glob("*.json")):
        crd = load_crd(path)
        found[
            (
                crd.json_schema["properties"]["apiVersion"]["const"],
                crd.json_schema["properties"]["kind"]["const"],
            )
        ] = crd
    return found


def known_kinds() -> set[str]:
    return {kind for _, kind in _schemas()}


def source_of(kind: str) -> dict[str, str]:
    (source,) = [crd.source for (_, k), crd in _schemas().items() if k == kind]
    return source


class CelRuleError(ValueError):
    """The object breaks a CEL rule of its pinned CRD (the API server would refuse it)."""


def validate_crd(manifest: dict[str, Any]) -> None:
    """Raise ``jsonschema.ValidationError`` unless the manifest fits its kind's pinned CRD schema,
    :class:`CelRuleError` if it breaks one of the CRD's CEL rules, ``KeyError`` for a kind or
    apiVersion without a pinned CRD (a render of a version nobody pinned)."""
    key = (manifest.get("apiVersion", ""), manifest.get("kind", ""))
    if key not in _schemas():
        raise KeyError(f"no pinned CRD schema for {key[0]} {key[1]}")
    validate_against(_schemas()[key], manifest)


def validate_against(crd: PinnedCrd, manifest: dict[str, Any]) -> None:
    """:func:`validate_crd` with a given CRD (e.g. a later version's)."""
    jsonschema.validate(manifest, crd.json_schema, cls=jsonschema.Draft202012Validator)
    stored = apply_defaults(crd.structural, copy.deepcopy(manifest))
    broken = cel_violations(crd.structural, stored)
    if broken:
        raise CelRuleError(f"{manifest['kind']} {manifest['metadata'].get('name')}: " + "; ".join(broken))
