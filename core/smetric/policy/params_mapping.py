"""``params_from_mapping``: PolicyParams from a YAML/CRD-style mapping (a trust boundary).

Keys are camelCase as in the CRD and the picker config; the snake_case field names are accepted
too. Unknown keys, wrong types (no string-to-number coercion) and out-of-range values raise
``ValueError`` naming each offending key.

Two kinds of keys share the flat mapping:

* the **shared context** (:class:`~smetric.policy.base.PolicyParams` fields, :class:`_ContextIn`
  below): ``preset`` (derives costModel, decodeStep, SLO, blockTokens), ``mode``,
  ``ttftSloBaseS``, ``ttftSloPerKTokS``, ``tpotSloS``, ``costModel {cLinS, cAttS}``,
  ``decodeStep {baseS, perKvTokenS}``, ``blockTokens`` (the engine's KV
  block size), ``seed``, ``globalFetchSPerToken``, ``globalSegmentTokens``, ``globalChunkTokens``;
* the **policy-owned** keys: every field of every registered policy's ``Params`` model
  (:mod:`smetric.policy.registry`; e.g. ``slack``, ``hitRatio``, ``overload``, ``lambda``,
  ``tiered {...}``) -- their defaults, ranges and descriptions are in those models, and
  ``smetric-operator gen-crd`` writes them into the CRD. A key of another policy than the one
  configured is accepted and unused, so a pool can switch policies without editing its
  parameters.

Explicit keys override what the preset derives (e.g. ``preset`` + ``tpotSloS`` changes only
the TPOT SLO). Without ``preset`` the defaults are those of :class:`PolicyParams`
(``qwen3-30b-h20``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace
from typing import Literal

from pydantic import AliasChoices, BaseModel, ConfigDict, Field, ValidationError

from smetric.core.costmodel import CostModel
from smetric.core.presets import get_preset
from smetric.core.slo import SloConfig
from smetric.core.validation import describe
from smetric.policy.base import DecodeStepModel, PolicyParams
from smetric.policy.params import ParamsModel
from smetric.policy.registry import REGISTRY, Registry

_CONFIG = ConfigDict(extra="forbid", strict=True, frozen=True, allow_inf_nan=False, populate_by_name=True)


def _key(camel: str, snake: str) -> AliasChoices:
    return AliasChoices(camel, snake)


class _CostModelIn(BaseModel):
    model_config = _CONFIG
    c_lin_s: float = Field(gt=0, validation_alias=_key("cLinS", "c_lin_s"))
    c_att_s: float = Field(ge=0, validation_alias=_key("cAttS", "c_att_s"))


class _DecodeStepIn(BaseModel):
    model_config = _CONFIG
    base_s: float = Field(ge=0, validation_alias=_key("baseS", "base_s"))
    per_kv_token_s: float = Field(ge=0, validation_alias=_key("perKvTokenS", "per_kv_token_s"))


class _ContextIn(BaseModel):
    """The shared context keys; ``None`` = what ``preset`` (or :class:`PolicyParams`) gives."""

    model_config = _CONFIG
    preset: str | None = Field(
        None,
        description="Instance preset (smetric.core.presets): derives costModel, decodeStep, SLO, blockTokens.",
    )
    mode: Literal["colocated", "disaggregated"] | None = Field(None, description="Serving mode of the pool.")
    ttft_slo_base_s: float | None = Field(
        None,
        gt=0,
        validation_alias=_key("ttftSloBaseS", "ttft_slo_base_s"),
        description="TTFT SLO b (seconds): the deadline is b + a * prompt tokens / 1000.",
    )
    ttft_slo_per_ktok_s: float | None = Field(
        None,
        ge=0,
        validation_alias=_key("ttftSloPerKTokS", "ttft_slo_per_ktok_s"),
        description="TTFT SLO a: seconds added per 1000 prompt tokens.",
    )
    tpot_slo_s: float | None = Field(
        None,
        gt=0,
        validation_alias=_key("tpotSloS", "tpot_slo_s"),
        description="TPOT SLO (seconds per token).",
    )
    cost_model: _CostModelIn | None = Field(
        None,
        validation_alias=_key("costModel", "cost_model"),
        description="Eq. 1 prefill cost coefficients {cLinS, cAttS} in seconds.",
    )
    decode_step: _DecodeStepIn | None = Field(
        None,
        validation_alias=_key("decodeStep", "decode_step"),
        description="Decode-step model {baseS, perKvTokenS} (TPOT guard, llm-d SLO).",
    )
    block_tokens: int | None = Field(
        None,
        ge=1,
        validation_alias=_key("blockTokens", "block_tokens"),
        description="The engine's KV block size in tokens (vLLM --block-size; Dynamo's block overlap).",
    )
    seed: int | None = Field(None, description="Seed of the random policy.")
    global_fetch_s_per_token: float | None = Field(
        None,
        ge=0,
        validation_alias=_key("globalFetchSPerToken", "global_fetch_s_per_token"),
        description="Seconds to load one token's KV from the global tier (SMetric's meets); "
        "omitted = local hits only.",
    )
    global_segment_tokens: int | None = Field(
        None,
        ge=1,
        validation_alias=_key("globalSegmentTokens", "global_segment_tokens"),
        description="KV tokens each engine pod contributes to the global tier (its Mooncake segment / "
        "KV bytes per token): the picker bounds its estimate of a prompt's global-tier hit without KV "
        "events (an LRU of what was written) by this x the engines it discovers; omitted = fully "
        "provisioned.",
    )
    global_chunk_tokens: int | None = Field(
        None,
        ge=1,
        validation_alias=_key("globalChunkTokens", "global_chunk_tokens"),
        description="The global tier's write unit in tokens (LMCache chunk_size; LMCache 0.5.6 stores whole "
        "chunks only, save_unfull_chunk false): the picker's write estimate records a routed prompt's whole "
        "chunks; omitted = the whole prompt.",
    )


_SCALARS = (
    "mode",
    "block_tokens",
    "seed",
    "global_fetch_s_per_token",
    "global_segment_tokens",
    "global_chunk_tokens",
)


def _accepted(model: type[BaseModel]) -> set[str]:
    """The keys ``model`` accepts: each field's alias (or alias choices) and its name."""
    keys: set[str] = set()
    for name, info in model.model_fields.items():
        keys.add(name)
        if info.alias:
            keys.add(info.alias)
        va = info.validation_alias
        if isinstance(va, AliasChoices):
            keys.update(c for c in va.choices if isinstance(c, str))
        elif isinstance(va, str):
            keys.add(va)
    return keys


CONTEXT_KEYS: frozenset[str] = frozenset(_accepted(_ContextIn))
# The context keys' schema (types, ranges, descriptions) for generated docs.
CONTEXT_MODEL: type[BaseModel] = _ContextIn


def policy_keys(registry: Registry = REGISTRY) -> frozenset[str]:
    """Every key some registered policy's ``Params`` model accepts (alias or field name)."""
    return frozenset(k for m in registry.param_models() for k in _accepted(m))


def params_from_mapping(mapping: Mapping[str, object] | None, registry: Registry = REGISTRY) -> PolicyParams:
    """Validated :class:`PolicyParams` from a YAML-style mapping (``None`` or ``{}`` = defaults):
    the context keys and, for each registered ``Params`` model, the keys it declares."""
    if mapping is None:
        return PolicyParams()
    if not isinstance(mapping, Mapping):
        raise ValueError(f"policy parameters must be a mapping, got {type(mapping).__name__}")
    models = registry.param_models()
    accepted = [(m, _accepted(m)) for m in models]
    problems: list[str] = []
    own_keys = set().union(*(keys for _, keys in accepted)) if accepted else set()
    problems += [f"{k}: unknown key" for k in mapping if k not in CONTEXT_KEYS and k not in own_keys]
    data: _ContextIn | None = None
    try:
        data = _ContextIn.model_validate({k: v for k, v in mapping.items() if k in CONTEXT_KEYS})
    except ValidationError as exc:
        problems.append(describe(exc, unknown_key=True))
    own: list[ParamsModel] = []
    for model, keys in accepted:
        given = {k: v for k, v in mapping.items() if k in keys}
        if not given:
            continue
        try:
            own.append(model.model_validate(given))
        except ValidationError as exc:
            problems.append(describe(exc, unknown_key=True))
    if problems or data is None:
        raise ValueError(f"invalid policy parameters: {'; '.join(dict.fromkeys(problems))}")

    params = PolicyParams()
    if data.preset is not None:
        try:
            preset = get_preset(data.preset)
        except ValueError as exc:
            raise ValueError(f"invalid policy parameters: preset: {exc}") from None
        params = replace(
            params,
            slo=preset.slo,
            cost_model=preset.cost_model,
            decode_step=DecodeStepModel.from_preset_name(preset.name),
            block_tokens=preset.block_size,
        )
    scalars = {name: getattr(data, name) for name in _SCALARS if getattr(data, name) is not None}
    slo = params.slo
    slo = SloConfig(
        ttft_base_s=slo.ttft_base_s if data.ttft_slo_base_s is None else data.ttft_slo_base_s,
        ttft_per_ktok_s=slo.ttft_per_ktok_s if data.ttft_slo_per_ktok_s is None else data.ttft_slo_per_ktok_s,
        tpot_s=slo.tpot_s if data.tpot_slo_s is None else data.tpot_slo_s,
    )
    cost_model = params.cost_model
    if data.cost_model is not None:
        cost_model = CostModel(c_lin_s=data.cost_model.c_lin_s, c_att_s=data.cost_model.c_att_s)
    decode_step = params.decode_step
    if data.decode_step is not None:
        decode_step = DecodeStepModel(
            base_s=data.decode_step.base_s, per_kv_token_s=data.decode_step.per_kv_token_s
        )
    return replace(params, slo=slo, cost_model=cost_model, decode_step=decode_step, own=tuple(own), **scalars)


def fetch_s_per_token(kv_bytes_per_token: float, link_gbit_s: float) -> float:
    """``global_fetch_s_per_token`` for a global tier read over a ``link_gbit_s`` link, e.g.
    ``fetch_s_per_token(PRESETS["qwen3-30b-h20"].model.kv_bytes_per_token, 200.0)`` (the
    paper's 200 Gbps RDMA NICs)."""
    if not (kv_bytes_per_token > 0 and link_gbit_s > 0):
        raise ValueError("kv_bytes_per_token and link_gbit_s must be > 0")
    return kv_bytes_per_token / (link_gbit_s * 1e9 / 8.0)
