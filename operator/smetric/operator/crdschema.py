"""OpenAPI v3.0 (structural) schema of a pydantic model, as a Kubernetes CRD states it.

The mapping, field by field (alias = the CRD key):

- a nested model -> ``type: object`` with its ``properties`` and ``required``; a field whose
  default is the model's own defaults gets ``default: {}`` (the API server then fills the
  nested defaults in, and CEL rules can read them);
- ``bool``/``int``/``float``/``str`` -> the scalar type; ``Literal[...]`` -> ``enum``;
- ``tuple[X, ...]`` -> ``type: array`` with ``items`` of X;
- ``dict[str, str]`` -> ``additionalProperties: {type: string}``; ``dict[str, Any]`` (a
  Kubernetes object passed through) -> ``x-kubernetes-preserve-unknown-fields``;
- ``gt``/``ge``/``lt``/``le``/``min_length``/``pattern`` -> the OpenAPI keywords;
- a default that is neither ``None`` nor empty -> ``default``; ``description`` -> ``description``;
- ``json_schema_extra`` (a field's or a model's) -> merged in last: the validations pydantic
  does not state as constraints (a CEL ``x-kubernetes-validations`` list, a ``pattern`` whose
  check a validator does with a clearer message, ``multipleOf``, an explicit ``default``); a key
  given as ``None`` is removed (``{"default": None}``: no schema default).

``schema_default=False`` leaves defaults out of the schema and says them in the description
(the policy-owned ``router.parameters`` keys: the picker applies the model's default itself).
"""

from __future__ import annotations

import types
import typing
from collections.abc import Iterator
from dataclasses import dataclass
from typing import Any

import annotated_types as at
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

SCALARS: dict[Any, str] = {bool: "boolean", int: "integer", float: "number", str: "string"}


def crd_key(name: str, info: FieldInfo) -> str:
    """The field's key in the CRD (its alias, camelCase)."""
    return info.alias or name


def strip_none(ann: Any) -> Any:
    """``X | None`` -> ``X`` (an optional field is one the CRD may omit)."""
    if isinstance(ann, types.UnionType) or typing.get_origin(ann) is typing.Union:
        args = [a for a in typing.get_args(ann) if a is not type(None)]
        if len(args) == 1:
            return args[0]
    return ann


def _model_type(ann: Any) -> type[BaseModel] | None:
    return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None


def type_schema(ann: Any, schema_default: bool = True) -> dict[str, Any]:
    """The schema of a type annotation (no default, no constraints)."""
    ann = strip_none(ann)
    model = _model_type(ann)
    if model is not None:
        return model_schema(model, schema_default)
    origin, args = typing.get_origin(ann), typing.get_args(ann)
    if origin is typing.Literal:
        kind = SCALARS.get(type(args[0]))
        if kind is None or any(type(a) is not type(args[0]) for a in args):
            raise TypeError(f"no OpenAPI enum for {ann!r}")
        return {"type": kind, "enum": list(args)}
    if origin is tuple and len(args) == 2 and args[1] is Ellipsis:
        return {"type": "array", "items": type_schema(args[0])}
    if origin is dict and args and args[0] is str:
        if args[1] is typing.Any:
            return {"type": "object", "x-kubernetes-preserve-unknown-fields": True}
        return {"type": "object", "additionalProperties": type_schema(args[1])}
    if ann in SCALARS:
        return {"type": SCALARS[ann]}
    raise TypeError(f"no OpenAPI type for {ann!r}")


def _default(info: FieldInfo) -> Any:
    """The field's default as the CRD states it, or ``PydanticUndefined`` for none."""
    factory = info.default_factory
    value = factory() if factory is not None else info.default  # type: ignore[call-arg]
    if value is PydanticUndefined or value is None:
        return PydanticUndefined
    if isinstance(value, BaseModel):
        return value.model_dump(by_alias=True, exclude_defaults=True, mode="json")
    if isinstance(value, tuple | list | dict) and not value:
        return PydanticUndefined
    if isinstance(value, tuple):
        return list(value)
    return value


def _constraints(info: FieldInfo) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for m in info.metadata:
        if isinstance(m, at.Gt):
            out.update(exclusiveMinimum=True, minimum=m.gt)
        elif isinstance(m, at.Ge):
            out["minimum"] = m.ge
        elif isinstance(m, at.Lt):
            out.update(exclusiveMaximum=True, maximum=m.lt)
        elif isinstance(m, at.Le):
            out["maximum"] = m.le
        elif isinstance(m, at.MinLen):
            out["minLength"] = m.min_length
        elif isinstance(m, at.MaxLen):
            out["maxLength"] = m.max_length
        elif getattr(m, "pattern", None) is not None:
            out["pattern"] = m.pattern
    return out


def _extra(source: Any) -> dict[str, Any]:
    if source is None:
        return {}
    if callable(source):
        raise TypeError("a callable json_schema_extra has no CRD form; give a dict")
    return dict(source)


def field_schema(info: FieldInfo, schema_default: bool = True) -> dict[str, Any]:
    """The schema of one field (see the module docstring for the mapping)."""
    out = type_schema(info.annotation, schema_default)
    description = info.description or ""
    default = _default(info)
    if default is not PydanticUndefined:
        if schema_default:
            out["default"] = default
        elif out["type"] != "object":
            shown = str(default).lower() if isinstance(default, bool) else repr(default)
            sentence = description if not description or description.endswith(".") else f"{description}."
            description = f"{sentence} Default {shown}.".strip()
    out.update(_constraints(info))
    if description:
        out["description"] = description
    for key, value in _extra(info.json_schema_extra).items():
        if value is None:
            out.pop(key, None)
        else:
            out[key] = value
    return out


def model_schema(model: type[BaseModel], schema_default: bool = True) -> dict[str, Any]:
    """``type: object`` with every field of ``model`` (and the model's own ``json_schema_extra``)."""
    fields = model.model_fields
    out: dict[str, Any] = {"type": "object"}
    required = [crd_key(n, f) for n, f in fields.items() if f.is_required()]
    if required:
        out["required"] = required
    out["properties"] = {crd_key(n, f): field_schema(f, schema_default) for n, f in fields.items()}
    out.update(_extra(model.model_config.get("json_schema_extra")))
    return out


@dataclass(frozen=True)
class FieldRow:
    """One field of a model tree: its dotted CRD path and the field itself."""

    path: str
    info: FieldInfo
    model: type[BaseModel] | None  # the nested model, when the field is one


def walk(model: type[BaseModel], prefix: str = "") -> Iterator[FieldRow]:
    """Every field of ``model`` and of its nested models, depth first, in declaration order.
    A model met twice (``pod`` under several parents) is listed under each path."""
    for name, info in model.model_fields.items():
        path = f"{prefix}{crd_key(name, info)}"
        nested = _model_type(strip_none(info.annotation))
        yield FieldRow(path, info, nested)
        if nested is not None:
            yield from walk(nested, f"{path}.")


def schema_paths(schema: dict[str, Any], prefix: str = "") -> Iterator[str]:
    """Every property path of an OpenAPI object schema (the same dotted form as :func:`walk`)."""
    for key, sub in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        yield path
        yield from schema_paths(sub, f"{path}.")
