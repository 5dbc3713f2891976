"""``params_from_mapping``: PolicyParams from a YAML/CRD-style mapping (a trust boundary).

Keys are camelCase as in the CRD and the picker config; the snake_case field names are accepted
too. Unknown keys, wrong types (no string-to-number coercion) and out-of-range values raise
``ValueError`` naming each offending key.

==========================  ==============================  ================================
key                         meaning                         constraint / default
==========================  ==============================  ================================
``preset``                  instance preset name            derives costModel, decodeStep, SLO
``mode``                    ``colocated`` / ``disaggregated``  default colocated
``slack``                   SLACK                           > 0, default 1.0
``hitRatio``                HIT_RATIO                       0 < x < 1, default 0.5
``overload``                OVERLOAD                        >= 1, default 2.0
``lambda``                  Bailian λ                       0 <= x <= 1, default 0.7
``ttftSloBaseS``            TTFT SLO ``b`` (s)              > 0, default preset's (1.0)
``ttftSloPerKTokS``         TTFT SLO ``a`` (s per 1K tok)   >= 0, default preset's (0.0625)
``tpotSloS``                TPOT SLO (s)                    > 0, default preset's
``costModel``               ``{cLinS, cAttS}``              > 0 and >= 0, default preset's
``decodeStep``              ``{baseS, perKvTokenS}``        >= 0, default preset's
``prebleHitFraction``       Preble's hit threshold          0 < x < 1, default 0.5
``prebleImbalanceGuard``    Preble's running-count guard    >= 0, default 8
``chunkTokens``             prefill chunk budget            >= 1, default 8192
``blockTokens``             KV block size (Dynamo)          >= 1, default 16
``seed``                    random policy seed              default 0
``sessionTableSize``        llmd-session LRU bound          >= 1, default 65536
``globalFetchSPerToken``    global-tier KV load s/token     >= 0, default none (local only)
``tiered``                 smetric-tiered switches         object, see below
==========================  ==============================  ================================

``tiered`` (smetric-tiered, :mod:`smetric.policy.tiered_params`): ``globalAware``,
``costAwareMigration``, ``nodeLocal``, ``footprint`` (booleans, default true),
``nodeLocalFetchSPerToken`` (>= 0 or null, default null = NIC rate), ``footprintWindowS``
(> 0, default 30), ``globalCapacityTokens`` (>= 1 or null = fully provisioned; the picker's
global-hit estimate when no KV event reports the global tier).

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
from smetric.policy.base import DecodeStepModel, PolicyParams

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


class _TieredIn(BaseModel):
    model_config = _CONFIG
    global_aware: bool | None = Field(None, validation_alias=_key("globalAware", "global_aware"))
    cost_aware_migration: bool | None = Field(
        None, validation_alias=_key("costAwareMigration", "cost_aware_migration")
    )
    node_local: bool | None = Field(None, validation_alias=_key("nodeLocal", "node_local"))
    footprint: bool | None = None
    node_local_fetch_s_per_token: float | None = Field(
        None, ge=0, validation_alias=_key("nodeLocalFetchSPerToken", "node_local_fetch_s_per_token")
    )
    footprint_window_s: float | None = Field(
        None, gt=0, validation_alias=_key("footprintWindowS", "footprint_window_s")
    )
    global_capacity_tokens: int | None = Field(
        None, ge=1, validation_alias=_key("globalCapacityTokens", "global_capacity_tokens")
    )


class _ParamsIn(BaseModel):
    model_config = _CONFIG
    preset: str | None = None
    mode: Literal["colocated", "disaggregated"] | None = None
    slack: float | None = Field(None, gt=0)
    hit_ratio: float | None = Field(None, gt=0, lt=1, validation_alias=_key("hitRatio", "hit_ratio"))
    overload: float | None = Field(None, ge=1)
    bailian_lambda: float | None = Field(
        None, ge=0, le=1, validation_alias=AliasChoices("lambda", "bailianLambda", "bailian_lambda")
    )
    ttft_slo_base_s: float | None = Field(
        None, gt=0, validation_alias=_key("ttftSloBaseS", "ttft_slo_base_s")
    )
    ttft_slo_per_ktok_s: float | None = Field(
        None, ge=0, validation_alias=_key("ttftSloPerKTokS", "ttft_slo_per_ktok_s")
    )
    tpot_slo_s: float | None = Field(None, gt=0, validation_alias=_key("tpotSloS", "tpot_slo_s"))
    cost_model: _CostModelIn | None = Field(None, validation_alias=_key("costModel", "cost_model"))
    decode_step: _DecodeStepIn | None = Field(None, validation_alias=_key("decodeStep", "decode_step"))
    preble_hit_fraction: float | None = Field(
        None, gt=0, lt=1, validation_alias=_key("prebleHitFraction", "preble_hit_fraction")
    )
    preble_imbalance_guard: int | None = Field(
        None, ge=0, validation_alias=_key("prebleImbalanceGuard", "preble_imbalance_guard")
    )
    chunk_tokens: int | None = Field(None, ge=1, validation_alias=_key("chunkTokens", "chunk_tokens"))
    block_tokens: int | None = Field(None, ge=1, validation_alias=_key("blockTokens", "block_tokens"))
    seed: int | None = None
    session_table_size: int | None = Field(
        None, ge=1, validation_alias=_key("sessionTableSize", "session_table_size")
    )
    global_fetch_s_per_token: float | None = Field(
        None, ge=0, validation_alias=_key("globalFetchSPerToken", "global_fetch_s_per_token")
    )
    tiered: _TieredIn | None = None


_SCALARS = (
    "mode",
    "slack",
    "hit_ratio",
    "overload",
    "bailian_lambda",
    "preble_hit_fraction",
    "preble_imbalance_guard",
    "chunk_tokens",
    "block_tokens",
    "seed",
    "session_table_size",
    "global_fetch_s_per_token",
)


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        msg = err["msg"]
        if err["type"] == "extra_forbidden":
            msg = "unknown key"
        parts.append(f"{where}: {msg}")
    return "; ".join(parts)


def params_from_mapping(mapping: Mapping[str, object] | None) -> PolicyParams:
    """Validated :class:`PolicyParams` from a YAML-style mapping (``None`` or ``{}`` = defaults)."""
    if mapping is None:
        return PolicyParams()
    if not isinstance(mapping, Mapping):
        raise ValueError(f"policy parameters must be a mapping, got {type(mapping).__name__}")
    try:
        data = _ParamsIn.model_validate(dict(mapping))
    except ValidationError as exc:
        raise ValueError(f"invalid policy parameters: {_describe(exc)}") from None

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
            chunk_tokens=preset.max_num_batched_tokens,
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
    tiered = params.tiered
    if data.tiered is not None:
        given = {k: v for k, v in data.tiered.model_dump().items() if v is not None}
        tiered = replace(tiered, **given)
    return replace(params, slo=slo, cost_model=cost_model, decode_step=decode_step, tiered=tiered, **scalars)


def fetch_s_per_token(kv_bytes_per_token: float, link_gbit_s: float) -> float:
    """``global_fetch_s_per_token`` for a global tier read over a ``link_gbit_s`` link, e.g.
    ``fetch_s_per_token(PRESETS["qwen3-30b-h20"].model.kv_bytes_per_token, 200.0)`` (the
    paper's 200 Gbps RDMA NICs)."""
    if not (kv_bytes_per_token > 0 and link_gbit_s > 0):
        raise ValueError("kv_bytes_per_token and link_gbit_s must be > 0")
    return kv_bytes_per_token / (link_gbit_s * 1e9 / 8.0)
