"""Policy-owned parameters: the pydantic base every policy's ``Params`` model derives from.

A policy declares its tunables as a :class:`ParamsModel` next to its class and registers
``(name, class, Params)`` in :mod:`smetric.policy.registry`. Field names are snake_case; the
YAML/CRD key is the camelCase alias (``hit_ratio`` -> ``hitRatio``) unless the field names
another alias; the snake_case name is accepted too. A field's default, range (``gt``/``ge``/
``lt``/``le``) and ``description`` are written here once: the picker's config parser, the
simulator (``--policy-config``) and the generated CRD schema (``smetric-operator gen-crd``)
all read them from the model.

The SMetric family shares these models (several policies read the same SLACK / HIT_RATIO, so the
default lives in one class and the policies subclass it): :class:`HitRatioParams` and
:class:`SlackParams` (one knob each), :class:`SessionParams` (the session-centric skeleton: HIT_RATIO
and the balance score's estimate) and :class:`SMetricParams` (those with the SLO check ``meets``).
``smetric-tiered`` has its own estimate switches and takes only HIT_RATIO and SLACK from here.
"""

from __future__ import annotations

from typing import Literal

from pydantic import BaseModel, ConfigDict, Field
from pydantic.alias_generators import to_camel


class ParamsModel(BaseModel):
    """Base of every policy's ``Params``: frozen, strict (no string-to-number coercion),
    unknown keys rejected, camelCase keys with the snake_case names accepted."""

    model_config = ConfigDict(
        extra="forbid",
        strict=True,
        frozen=True,
        allow_inf_nan=False,
        populate_by_name=True,
        alias_generator=to_camel,
    )


class NoParams(ParamsModel):
    """A policy without parameters of its own (it may still read the shared context)."""


class HitRatioParams(ParamsModel):
    """HIT_RATIO, read by every session-centric policy (paper Fig. 13)."""

    hit_ratio: float = Field(
        default=0.5,
        gt=0,
        lt=1,
        description="HIT_RATIO: a follow-up counts as cached on prev when c[prev] > HIT_RATIO * est_hit "
        "(paper Fig. 13; algorithms.md).",
    )


class SlackParams(ParamsModel):
    """SLACK, read by every policy with SMetric's SLO check (``meets``)."""

    slack: float = Field(
        default=1.0,
        gt=0,
        description="SLACK: an endpoint meets when its TTFT estimate is <= SLACK * TTFT SLO "
        "(paper Fig. 13; algorithms.md).",
    )


class CachedMovesParams(ParamsModel):
    """Whether the global tier may move a session a GPU still holds (the tier-aware estimate and the
    overload fallback; :func:`smetric.policy.pieces.stays_put`)."""

    cached_moves: Literal["backed", "always"] = Field(
        default="backed",
        description="a follow-up whose session a GPU still holds: backed = the tier-aware estimate and "
        "the overload fallback may move it only if the global tier can hold what the GPUs evict (its "
        "capacity, globalSegmentTokens x the endpoints, at least the endpoints' total KV capacity; "
        "unset globalSegmentTokens = a fully provisioned tier), else it is routed as without a tier; "
        "always = the tier credited whatever its size (ablation).",
    )
    cached_moves_room: float = Field(
        default=4.0,
        ge=0,
        description="backed applies only to a session its GPU has room for this many times over (the "
        "endpoint with the longest local hit has kv_capacity_tokens >= cachedMovesRoom x the prompt "
        "tokens): a session that fills a large share of its GPU is evicted there before its next turn "
        "anyway, so keeping it put buys one hit and piles sessions on their pods; 0 = every session. "
        "4 chosen on development seeds 0-2 (docs/evidence.md, 'One H20 per instance').",
    )


class SessionParams(HitRatioParams, CachedMovesParams):
    """The session-centric skeleton (paper Fig. 13): HIT_RATIO and the balance score's estimate."""

    balance_estimate: Literal["tier", "local"] = Field(
        default="tier",
        description="balance score's time estimate: tier = the work the ledger charges (compute of "
        "L - max(c, g) tokens, fetch of max(c, g) - c, queued fetch; docs/policies.md); local = "
        "(q + cost(L - c, L)) / rate, algorithms.md literally (ablation).",
    )
    queued_fetch: bool = Field(
        default=True,
        description="tier estimates add the endpoint's queued global-tier fetch seconds (the engine "
        "stalls its batch for them); false = ablation.",
    )


class SMetricParams(SessionParams, SlackParams):
    """Session-centric policies with SMetric's SLO check (``meets``)."""

    meets_estimate: Literal["tier", "session", "local"] = Field(
        default="tier",
        description="meets' TTFT estimate: tier = the balance score's tier estimate; session = "
        "h = max(c, est_hit) plus its fetch, no queued fetch; local = "
        "(q + cost(L - c, L)) / rate, algorithms.md literally (ablations).",
    )
    nobody_meets: Literal["stick", "argmin", "least-loaded"] = Field(
        default="least-loaded",
        description="when no endpoint meets: stick = a cached follow-up keeps prev (algorithms.md); "
        "argmin = it takes the least balance score; least-loaded = with a global tier, every request "
        "that can move at the cost of a fetch (a first turn, or a session whose prefix the tier holds) "
        "goes to the least 4 x waiting + running of the engines' own gauges, the rest stick "
        "(docs/policies.md, measured).",
    )
