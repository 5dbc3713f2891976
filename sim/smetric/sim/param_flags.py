"""``smetric simulate --param NAME.KEY=VALUE``: any policy's own parameter, without a YAML file.

``NAME`` is a registered policy, ``KEY`` a key of its ``Params`` model (the camelCase key of the
picker's config and the CRD, or the snake_case field name), ``KEY.SUB`` a key of a nested model
(``smetric-tiered.tiered.footprint=false``). ``VALUE`` is read as a YAML scalar (``1.5``,
``true``, ``tier``). The parameters form one flat mapping, as in the picker's config: a key that
several policies read (``hitRatio``) is set for all of them.

Each key is checked against the named policy's model here, so a typo names the policy and its
keys; the value's type and range are checked by the policies' parser afterwards, exactly as the
picker checks its config.

:func:`policy_parameters` puts the policy flags together (``--policy-config``, ``--slack``,
``--hit-ratio``, ``--param``, ``--tiered-off``); :func:`flow_control_json` the flow-control ones
(``--flow-control``, ``--fc``).
"""

from __future__ import annotations

import argparse
import json
from collections.abc import Mapping, Sequence

import yaml
from pydantic import BaseModel

from smetric.policy.params_mapping import CONTEXT_KEYS
from smetric.policy.registry import REGISTRY, Registry
from smetric.policy.tiered_params import TieredParams


def _keys(model: type[BaseModel]) -> dict[str, str]:
    """Accepted spelling -> the canonical (camelCase) key, for every field of ``model``."""
    out: dict[str, str] = {}
    for name, info in model.model_fields.items():
        key = info.alias or name
        out[key] = key
        out[name] = key
    return out


def _nested(model: type[BaseModel], key: str) -> type[BaseModel] | None:
    for name, info in model.model_fields.items():
        if key in (name, info.alias):
            ann = info.annotation
            return ann if isinstance(ann, type) and issubclass(ann, BaseModel) else None
    return None


def parse_param(text: str, registry: Registry = REGISTRY) -> tuple[tuple[str, ...], object]:
    """``"smetric.slack=1.5"`` -> ``(("slack",), 1.5)``: the canonical key path and the value.
    ``ValueError`` naming the problem (no ``=``, an unknown policy, a key the policy does not
    read, a value that is not a YAML scalar)."""
    target, sep, raw = text.partition("=")
    if not sep or not target.strip():
        raise ValueError(f"--param {text!r}: expected NAME.KEY=VALUE (e.g. smetric.slack=1.5)")
    policy = next(
        (n for n in sorted(registry.names, key=len, reverse=True) if target.startswith(f"{n}.")), None
    )
    if policy is None:
        raise ValueError(f"--param {text!r}: NAME must be one of {', '.join(registry.names)}")
    model: type[BaseModel] = registry.entry(policy).params
    parts = target[len(policy) + 1 :].split(".")
    path: list[str] = []
    for i, part in enumerate(parts):
        keys = _keys(model)
        where = ".".join([policy, *path])
        if part not in keys:
            known = ", ".join(sorted(set(keys.values()))) or "none"
            raise ValueError(f"--param {text!r}: {where} has no parameter {part!r} (its keys: {known})")
        path.append(keys[part])
        sub = _nested(model, part)
        last = i == len(parts) - 1
        if sub is None and not last:
            raise ValueError(f"--param {text!r}: {where}.{keys[part]} has no nested keys")
        if sub is not None and last:
            raise ValueError(f"--param {text!r}: {where}.{keys[part]} is a group; set one of its keys")
        if sub is not None:
            model = sub
    try:
        value = yaml.safe_load(raw) if raw.strip() else raw
    except yaml.YAMLError:
        raise ValueError(f"--param {text!r}: the value is not a YAML scalar") from None
    if isinstance(value, Mapping | list):
        raise ValueError(f"--param {text!r}: the value must be a scalar (set nested keys one by one)")
    return tuple(path), value


def apply_params(
    given: dict[str, object], items: Sequence[str], registry: Registry = REGISTRY
) -> dict[str, object]:
    """``given`` (the policy-owned parameters so far) with each ``--param`` set on top."""
    out: dict[str, object] = dict(given)
    for item in items:
        path, value = parse_param(item, registry)
        node = out
        for key in path[:-1]:
            child = node.get(key)
            child = dict(child) if isinstance(child, Mapping) else {}
            node[key] = child
            node = child
        node[path[-1]] = value
    return out


def policy_parameters(a: argparse.Namespace) -> tuple[str | None, str, list[str]]:
    """``(policy of --policy-config or None, policy-owned parameters as canonical JSON, notes)``:
    the file's ``policy.parameters`` without the context keys, then --slack, --hit-ratio, --param
    and --tiered-off on top."""
    from smetric.policy.pickerconfig import load_own_config, policy_params

    name: str | None = None
    given: dict[str, object] = {}
    notes: list[str] = []
    if a.policy_config is not None:
        cfg = load_own_config(a.policy_config)
        policy_params(cfg)  # validated exactly as the picker validates it
        name = cfg.policy.name
        given = {k: v for k, v in cfg.policy.parameters.items() if k not in CONTEXT_KEYS}
        ignored = sorted(k for k in cfg.policy.parameters if k in CONTEXT_KEYS)
        if ignored:
            notes.append(
                f"--policy-config: {', '.join(ignored)} set by the simulated cluster (--preset, --mode), "
                "not the file"
            )
    if a.slack is not None:
        given["slack"] = a.slack
    if a.hit_ratio is not None:
        given["hitRatio"] = a.hit_ratio
    given = apply_params(given, a.param, getattr(a, "registry", REGISTRY))
    off = [m.strip() for m in a.tiered_off.split(",") if m.strip()]
    if off:
        tiered = given.get("tiered", {})
        if not isinstance(tiered, dict):
            raise ValueError("policy parameters: tiered must be a mapping")
        given["tiered"] = TieredParams.model_validate(tiered).without(*off).model_dump(by_alias=True)
    return name, json.dumps(given, sort_keys=True), notes


def flow_control_json(enabled: bool, pairs: list[str]) -> str:
    """``SimConfig.flow_control`` from ``--flow-control`` and ``--fc KEY=VALUE`` (YAML scalars)."""
    if not enabled and not pairs:
        return ""
    mapping: dict[str, object] = {"enabled": True}
    for text in pairs:
        key, sep, value = text.partition("=")
        if not sep or not key.strip():
            raise ValueError(f"--fc {text!r}: expected KEY=VALUE (e.g. ttl_s=30)")
        mapping[key.strip()] = yaml.safe_load(value)
    return json.dumps(mapping, sort_keys=True)
