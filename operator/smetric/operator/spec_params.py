"""Spec models shared by the ``SMetricPool`` spec's modules: the base model (camelCase keys, unknown
fields refused, frozen) and ``router.parameters`` (:class:`PolicyParameters`)."""

from __future__ import annotations

from typing import Any

from pydantic import BaseModel, ConfigDict, Field, model_validator
from pydantic.alias_generators import to_camel

from smetric.policy.params_mapping import params_from_mapping, policy_keys


class SpecModel(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class CostModelSpec(SpecModel):
    c_lin_s: float = Field(gt=0.0, alias="cLinS")
    c_att_s: float = Field(ge=0.0, alias="cAttS")


class PolicyParameters(SpecModel):
    """``router.parameters``: the pool's SLO, cost model and global-tier fetch rate (the policy
    context; typed here) plus the policy-owned keys of every registered policy's ``Params``
    model (``slack``, ``hitRatio``, ``tiered``, ...), kept as given and validated by the
    policies' own parser -- their defaults and ranges live only in those models
    (``smetric.policy.registry``; the CRD schema is generated from them: ``smetric-operator
    gen-crd``)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=True)
    ttft_slo_base_s: float = Field(default=1.0, gt=0.0, alias="ttftSloBaseS")
    ttft_slo_per_k_tok_s: float = Field(default=0.0625, ge=0.0, alias="ttftSloPerKTokS")
    tpot_slo_s: float = Field(default=0.02, gt=0.0, alias="tpotSloS")
    cost_model: CostModelSpec | None = Field(
        default=None,
        description="Eq. 1 coefficients in seconds (omit to use the picker's preset for the model).",
    )
    global_fetch_s_per_token: float | None = Field(
        default=None,
        ge=0.0,
        alias="globalFetchSPerToken",
        description="Seconds to load one token's KV from the global tier (KV bytes per token / load bytes "
        "per second). With globalKV.enabled the policies' estimates credit a session's global-tier copy at "
        "this cost. Omitted: derived from the model's preset (its KV bytes per token with model.kvCacheDtype "
        "and model.tensorParallelSize, at the calibrated LMCache + Mooncake load rate); a model without a "
        "preset then credits local hits only. Ignored without globalKV.enabled.",
    )
    global_segment_tokens: int | None = Field(
        default=None,
        ge=1,
        alias="globalSegmentTokens",
        description="KV tokens each engine pod contributes to the global tier. The picker bounds its "
        "estimate of which sessions the tier still holds, when no KV events report it, by this x the "
        "engines it discovers (SMetric then treats an evicted session as a recompute, not a fetch). "
        "Omitted: globalKV.segmentSize / the model's KV bytes per token (its preset, with "
        "model.kvCacheDtype and model.tensorParallelSize); a model without a preset: fully "
        "provisioned. Ignored without globalKV.enabled.",
    )

    @model_validator(mode="after")
    def _policy_owned(self) -> PolicyParameters:
        extra = dict(self.model_extra or {})
        unknown = sorted(k for k in extra if k not in policy_keys())
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(unknown)}")
        params_from_mapping(extra)  # ranges and types (ValueError names the key)
        return self

    @property
    def policy_owned(self) -> dict[str, Any]:
        """The policy-owned keys as given (camelCase), rendered into the picker's config."""
        return dict(self.model_extra or {})
