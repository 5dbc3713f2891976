"""Rewrite the generated blocks of the docs from the typed sources.

::

    python docs/gen.py            # rewrite every stale block in place
    python docs/gen.py --check    # exit 1 naming each stale block (tests/unit/project/test_docs_generated.py)

A block is the text between ``<!-- generated: NAME -->`` and the next ``<!-- end generated -->``
in the file :data:`BLOCKS` names for it; only that text changes. Sources:

- ``policy-context``, ``policy-parameters`` (docs/policies.md): the policy context's schema
  (``smetric.policy.params_mapping.CONTEXT_MODEL``, defaults from ``PolicyParams()``) and every
  registered policy's ``Params`` model (``smetric.policy.registry.REGISTRY``);
- ``picker-flags`` (docs/picker.md): the picker's flag table ``smetric.core.pickerflags.FLAGS``;
- ``picker-metrics``, ``upstream-metrics``, ``llmd-metrics`` (docs/picker.md): the series
  ``smetric.epp.obs.metrics.PickerMetrics`` registers (ours, GIE's, llm-d-router's; the last with
  each claim's upstream source line, ``smetric.epp.obs.parity``);
- ``llmd-not-exported``, ``gie-not-exported`` (docs/picker.md): the upstream series not exported,
  and why (``smetric.epp.obs.parity``);
- ``crd-fields``, ``crd-validations`` (docs/crd-reference.md): the CRD's ``.spec`` schema as
  ``smetric-operator gen-crd`` generates it from ``SMetricPoolSpec``.
"""

from __future__ import annotations

import argparse
import json
import re
import sys
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import annotated_types as at
from prometheus_client import CollectorRegistry
from pydantic import BaseModel
from pydantic.fields import FieldInfo
from pydantic_core import PydanticUndefined

from smetric.core.pickerflags import FLAGS
from smetric.epp.obs.metrics import PickerMetrics
from smetric.epp.obs.parity import GIE_NOT_EXPORTED, LLMD_CLAIMS, LLMD_NOT_EXPORTED, NotExported
from smetric.operator.gencrd import spec_schema
from smetric.policy.base import PolicyParams
from smetric.policy.params_mapping import CONTEXT_MODEL
from smetric.policy.registry import REGISTRY, Registry

DOCS = Path(__file__).resolve().parent
COMMAND = "python docs/gen.py"
BEGIN = re.compile(r"^<!-- generated: ([a-z0-9-]+) -->$")
END = "<!-- end generated -->"


def _cell(text: object) -> str:
    return str(text).replace("|", "\\|").replace("\n", " ")


def _table(header: Sequence[str], rows: Sequence[Sequence[object]]) -> str:
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(_cell(c) for c in row) + " |" for row in rows]
    return "\n".join(lines) + "\n"


def _value(value: object) -> str:
    if isinstance(value, bool):
        return f"`{str(value).lower()}`"
    if isinstance(value, str):
        return f"`{value}`"
    if isinstance(value, tuple | list):
        return "`[" + ", ".join(str(v) for v in value) + "]`"
    return f"`{value}`"


def _range(info: FieldInfo) -> str:
    """``0 < x < 1``, ``≥ 1``, ``tier | local``, ``bool`` ..."""
    lower = upper = ""
    for m in info.metadata:
        if isinstance(m, at.Gt):
            lower = f"{m.gt} <"
        elif isinstance(m, at.Ge):
            lower = f"{m.ge} ≤"
        elif isinstance(m, at.Lt):
            upper = f"< {m.lt}"
        elif isinstance(m, at.Le):
            upper = f"≤ {m.le}"
    if lower and upper:
        return f"{lower} x {upper}"
    if lower:
        return f"x {'>' if lower.endswith('<') else '≥'} {lower[:-2]}"
    if upper:
        return f"x {upper}"
    ann = str(info.annotation).replace("typing.", "")
    literal = re.fullmatch(r"Literal\[(.*)\](?: \| None)?", ann)
    if literal:
        return " | ".join(v.strip().strip("'\"") for v in literal.group(1).split(","))
    return {"<class 'bool'>": "bool", "<class 'int'>": "int"}.get(ann, "")


def _key(name: str, info: FieldInfo) -> str:
    return info.alias or name


def _own_default(info: FieldInfo) -> str:
    factory = info.default_factory
    default = factory() if factory is not None else info.default  # type: ignore[call-arg]
    if default is PydanticUndefined or default is None:
        return "none"
    if isinstance(default, BaseModel):
        return "(the keys below)"
    return _value(default)


def policy_parameters(registry: Registry = REGISTRY) -> str:
    """One row per policy-owned key (nested models' keys as ``outer.inner``)."""
    rows: list[list[object]] = []
    seen: set[str] = set()
    for model in registry.param_models():
        for name, info in model.model_fields.items():
            key = _key(name, info)
            if key in seen:
                continue
            seen.add(key)
            readers = [e.name for e in registry if name in e.params.model_fields]
            shown = f"`{key}`" if key == name else f"`{key}` / `{name}`"
            rows.append([shown, ", ".join(readers), _own_default(info), _range(info), info.description or ""])
            nested = info.annotation if isinstance(info.annotation, type) else None
            if nested is not None and issubclass(nested, BaseModel):
                for sub, sub_info in nested.model_fields.items():
                    rows.append(
                        [
                            f"`{key}.{_key(sub, sub_info)}`",
                            ", ".join(readers),
                            _own_default(sub_info),
                            _range(sub_info),
                            sub_info.description or "",
                        ]
                    )
    return _table(("key", "read by", "default", "range", "meaning"), rows)


def _context_default(name: str, p: PolicyParams) -> str:
    """The default of one context key: :class:`PolicyParams` (the qwen3-30b-h20 preset's values)."""
    values: dict[str, Callable[[PolicyParams], str]] = {
        "preset": lambda _: "none",
        "mode": lambda q: _value(q.mode),
        "ttft_slo_base_s": lambda q: _value(q.slo.ttft_base_s),
        "ttft_slo_per_ktok_s": lambda q: _value(q.slo.ttft_per_ktok_s),
        "tpot_slo_s": lambda q: _value(q.slo.tpot_s),
        "cost_model": lambda q: f"`{{cLinS: {q.cost_model.c_lin_s:g}, cAttS: {q.cost_model.c_att_s:g}}}`",
        "decode_step": lambda q: (
            f"`{{baseS: {q.decode_step.base_s:g}, perKvTokenS: {q.decode_step.per_kv_token_s:g}}}`"
        ),
        "block_tokens": lambda q: _value(q.block_tokens),
        "seed": lambda q: _value(q.seed),
        "global_fetch_s_per_token": lambda q: (
            "none" if q.global_fetch_s_per_token is None else _value(q.global_fetch_s_per_token)
        ),
        "global_segment_tokens": lambda q: (
            "none" if q.global_segment_tokens is None else _value(q.global_segment_tokens)
        ),
        "global_chunk_tokens": lambda q: (
            "none" if q.global_chunk_tokens is None else _value(q.global_chunk_tokens)
        ),
    }
    if name not in values:
        raise KeyError(f"context key {name!r} has no default rule in docs/gen.py (_context_default)")
    return values[name](p)


def policy_context() -> str:
    params = PolicyParams()
    rows: list[list[object]] = []
    for name, info in CONTEXT_MODEL.model_fields.items():
        choices = getattr(info.validation_alias, "choices", None)
        key = str(choices[0]) if choices else name
        shown = f"`{key}`" if key == name else f"`{key}` / `{name}`"
        rows.append([shown, _context_default(name, params), _range(info), info.description or ""])
    return _table(("key", "default", "range", "meaning"), rows)


def _family(name: str) -> str:
    return "ours" if name.startswith("smetric_epp_") else "llmd" if name.startswith("llm_d_epp_") else "gie"


def _series(which: str) -> list[list[object]]:
    """The series a fresh :class:`PickerMetrics` registers of one family: ``ours``
    (``smetric_epp_*``), ``llmd`` (``llm_d_epp_*``) or ``gie`` (the others).
    prometheus_client has no public listing of a registry's collectors or of a metric's label
    names; ``_collector_to_names`` and ``_labelnames`` are read here (the staleness test fails
    loudly if they change)."""
    registry = CollectorRegistry()
    PickerMetrics(registry, "pool")
    rows: list[tuple[str, str, str, str]] = []
    names: set[str] = set()
    for collector in list(registry._collector_to_names):
        (desc,) = collector.describe()  # type: ignore[attr-defined]
        if _family(desc.name) != which:
            continue
        exposed = f"{desc.name}_total" if desc.type == "counter" else desc.name
        names.add(exposed)
        labels = ", ".join(f"`{label}`" for label in getattr(collector, "_labelnames", ()))
        rows.append((exposed, desc.type, labels, desc.documentation))
    if which == "ours":
        return [[f"`{name}`", kind, labels, doc] for name, kind, labels, doc in rows]
    if which == "llmd":
        source = {c.name: c.source for c in LLMD_CLAIMS}
        return [
            [f"`{name}`", kind, labels, f"`{source.get(name, '?')}`", doc] for name, kind, labels, doc in rows
        ]
    # one row for a series both per-model families export (GIE v1.0.0 and v1.1.0+ names)
    out: list[list[object]] = []
    for name, kind, labels, doc in rows:
        if name.startswith("inference_model_"):
            continue
        twin = name.replace("inference_objective_", "inference_model_", 1)
        if name.startswith("inference_objective_") and twin in names:
            out.append([f"`{name}`, `{twin}`", kind, labels, doc])
        else:
            out.append([f"`{name}`", kind, labels, doc])
    return out


# defaults pickerflags reads from the environment at import (default_bind_address, $NAMESPACE):
# their meaning says what they are, so the generated table does not depend on where it runs
_ENV_DEFAULT_FLAGS = frozenset({"bind-address", "pool-namespace"})


def picker_flags() -> str:
    """The picker's own flags (``smetric.core.pickerflags.FLAGS``): the one place each default and
    each set of allowed values is written; prose names the flag and refers here."""
    rows = [
        [
            ", ".join(f"`--{n}`" for n in (f.name, *f.aliases)),
            "see meaning" if f.name in _ENV_DEFAULT_FLAGS else _value(f.default),
            ", ".join(f"`{c}`" for c in f.choices),
            f.help,
        ]
        for f in FLAGS
    ]
    return _table(("flag", "default", "choices", "meaning"), rows)


def picker_metrics() -> str:
    return _table(("series", "type", "labels", "meaning"), _series("ours"))


def upstream_metrics() -> str:
    return _table(("series", "type", "labels", "meaning"), _series("gie"))


def llmd_metrics() -> str:
    return _table(("series", "type", "labels", "llm-d-router v0.10.0 source", "meaning"), _series("llmd"))


def _not_exported(entries: Sequence[NotExported]) -> str:
    return _table(
        ("series", "upstream source", "why not"), [[f"`{e.name}`", f"`{e.source}`", e.why] for e in entries]
    )


def llmd_not_exported() -> str:
    return _not_exported(LLMD_NOT_EXPORTED)


def gie_not_exported() -> str:
    return _not_exported(GIE_NOT_EXPORTED)


def _crd_rows(
    schema: dict[str, Any], prefix: str, required: Sequence[str], seen: dict[str, str]
) -> Iterator[list[object]]:
    """One row per property, depth first; an object whose fields were already listed under
    another path (the pod overrides) points there instead of repeating them."""
    for key, sub in schema.get("properties", {}).items():
        path = f"{prefix}{key}"
        text = _crd_text(sub)
        fields = json.dumps(sub.get("properties"), sort_keys=True) if "properties" in sub else ""
        first = seen.setdefault(fields, path) if fields else path
        if first != path:
            text = f"{text} Fields as `{first}`.".strip()
        yield [f"`{path}`", _crd_type(sub), _crd_default(sub), _crd_checks(sub, key in required), text]
        if fields and first == path:
            yield from _crd_rows(sub, f"{path}.", sub.get("required", ()), seen)


def _crd_type(schema: dict[str, Any]) -> str:
    kind = str(schema.get("type", ""))
    if kind == "array":
        return f"[]{_crd_type(schema['items'])}"
    if kind == "object" and "additionalProperties" in schema:
        return f"map[string]{_crd_type(schema['additionalProperties'])}"
    if kind == "object" and schema.get("x-kubernetes-preserve-unknown-fields"):
        return "object (Kubernetes fields, passed through)"
    return kind


def _crd_default(schema: dict[str, Any]) -> str:
    if "default" not in schema:
        return ""
    default = schema["default"]
    if isinstance(default, dict):
        return f"`{json.dumps(default, separators=(', ', ': '))}`"
    return _value(default)


def _crd_checks(schema: dict[str, Any], required: bool) -> str:
    out: list[str] = ["required"] if required else []
    if "enum" in schema:
        out.append(" | ".join(str(v) for v in schema["enum"]))
    if "minimum" in schema:
        out.append(f"{'>' if schema.get('exclusiveMinimum') else '≥'} {schema['minimum']}")
    if "maximum" in schema:
        out.append(f"{'<' if schema.get('exclusiveMaximum') else '≤'} {schema['maximum']}")
    if "multipleOf" in schema:
        out.append(f"multiple of {schema['multipleOf']}")
    if "minLength" in schema:
        out.append(f"length ≥ {schema['minLength']}")
    if "pattern" in schema:
        out.append(f"`{schema['pattern']}`")
    items = schema.get("items", {})
    if "pattern" in items:
        out.append(f"items `{items['pattern']}`")
    return "; ".join(out)


def _crd_text(schema: dict[str, Any]) -> str:
    return str(schema.get("description", ""))


def crd_fields() -> str:
    schema = spec_schema()
    return _table(
        ("field (`spec.`)", "type", "default", "validation", "description"),
        list(_crd_rows(schema, "", schema.get("required", ()), {})),
    )


def crd_validations() -> str:
    rules = spec_schema()["x-kubernetes-validations"]
    return _table(("message", "CEL rule on `spec`"), [[r["message"], f"`{r['rule']}`"] for r in rules])


BLOCKS: dict[str, tuple[str, Callable[[], str]]] = {
    "policy-context": ("policies.md", policy_context),
    "policy-parameters": ("policies.md", policy_parameters),
    "picker-flags": ("picker.md", picker_flags),
    "picker-metrics": ("picker.md", picker_metrics),
    "upstream-metrics": ("picker.md", upstream_metrics),
    "gie-not-exported": ("picker.md", gie_not_exported),
    "llmd-metrics": ("picker.md", llmd_metrics),
    "llmd-not-exported": ("picker.md", llmd_not_exported),
    "crd-fields": ("crd-reference.md", crd_fields),
    "crd-validations": ("crd-reference.md", crd_validations),
}


def render(text: str, blocks: dict[str, str]) -> str:
    """``text`` with each named block's body replaced; ``ValueError`` for a marker problem
    (an unknown name, a block opened twice or never closed, a block of ``blocks`` not found)."""
    lines = text.splitlines(keepends=True)
    out: list[str] = []
    found: set[str] = set()
    i = 0
    while i < len(lines):
        line = lines[i]
        out.append(line)
        match = BEGIN.match(line.strip())
        i += 1
        if match is None:
            continue
        name = match.group(1)
        if name not in blocks:
            raise ValueError(f"unknown generated block {name!r}")
        if name in found:
            raise ValueError(f"generated block {name!r} appears twice")
        found.add(name)
        while i < len(lines) and lines[i].strip() != END:
            if BEGIN.match(lines[i].strip()):
                raise ValueError(f"generated block {name!r} is not closed before the next one")
            i += 1
        if i == len(lines):
            raise ValueError(f"generated block {name!r} has no {END}")
        out.append(blocks[name])
    missing = sorted(set(blocks) - found)
    if missing:
        raise ValueError(f"generated block(s) {', '.join(missing)} not found")
    return "".join(out)


def expected(docs: Path = DOCS) -> dict[Path, str]:
    """Each file with generated blocks -> its text with every block rendered."""
    per_file: dict[str, dict[str, str]] = {}
    for name, (file, make) in BLOCKS.items():
        per_file.setdefault(file, {})[name] = make()
    return {docs / f: render((docs / f).read_text(encoding="utf-8"), b) for f, b in per_file.items()}


def stale(docs: Path = DOCS) -> list[Path]:
    return [p for p, text in expected(docs).items() if p.read_text(encoding="utf-8") != text]


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog=COMMAND, description=__doc__.split("\n\n")[0])
    ap.add_argument("--check", action="store_true", help="exit 1 when a generated block is stale")
    args = ap.parse_args(argv)
    if args.check:
        old = stale()
        for p in old:
            print(f"{p.relative_to(DOCS.parent)} has stale generated blocks; run: {COMMAND}", file=sys.stderr)
        return 1 if old else 0
    for p, text in expected().items():
        if p.read_text(encoding="utf-8") != text:
            p.write_text(text, encoding="utf-8")
            print(f"wrote {p.relative_to(DOCS.parent)}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
