"""The policy extension point: one small interface, frozen inputs, a frozen decision."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field, replace
from typing import Literal, Protocol, TypeVar

from smetric.core.costmodel import CostModel
from smetric.core.presets import PRESETS, get_preset
from smetric.core.slo import SloConfig
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.params import ParamsModel

Mode = Literal["colocated", "disaggregated"]

_DEFAULT_PRESET = PRESETS["qwen3-30b-h20"]


@dataclass(frozen=True, slots=True)
class DecodeStepModel:
    """Linear estimate of one colocated engine step, for the TPOT guard.

    ``step_s = base_s + per_kv_token_s * active_kv_tokens + cost(prefill chunk)``; ``base_s`` is the
    time to stream the weights once (plus launch overhead), ``per_kv_token_s`` the time to stream one
    token's KV -- both from the roofline of :mod:`smetric.core.presets`.
    """

    base_s: float
    per_kv_token_s: float

    def token_scaled(self, k: float) -> DecodeStepModel:
        """One step per token standing for ``k`` tokens: ``k`` real steps over ``k`` times the KV,
        i.e. ``base k`` and ``per_kv_token k^2`` (the cost-preserving token scale)."""
        return DecodeStepModel(base_s=self.base_s * k, per_kv_token_s=self.per_kv_token_s * k * k)

    @staticmethod
    def from_preset_name(name: str) -> DecodeStepModel:
        p = get_preset(name)  # a base preset or a variant (kv=fp8, tp=2, ...)
        bw = p.hbm_bytes_s * p.hbm_efficiency
        # MoE decode touches only the active experts' weights at small batch; use active params.
        weight_bytes = p.model.active_params_b * 1e9 * p.model.weight_bytes_per_param
        return DecodeStepModel(
            base_s=weight_bytes / bw + p.step_overhead_s,
            per_kv_token_s=p.model.kv_bytes_per_token / bw,
        )


M = TypeVar("M", bound=ParamsModel)


@dataclass(frozen=True, slots=True)
class PolicyParams:
    """What a policy is built from: the shared context every policy may read (mode, SLO, cost
    model, decode step, block size, ...) and ``own``, the policy-owned :class:`ParamsModel`
    instances (each policy's ``Params``, :mod:`smetric.policy.registry`). A policy reads its
    own with :meth:`get`; a model absent from ``own`` gives that model's defaults, so
    ``PolicyParams()`` is every policy with its documented defaults."""

    mode: Mode = "colocated"
    slo: SloConfig = field(default_factory=lambda: _DEFAULT_PRESET.slo)
    cost_model: CostModel = field(default_factory=lambda: _DEFAULT_PRESET.cost_model)
    decode_step: DecodeStepModel = field(
        default_factory=lambda: DecodeStepModel.from_preset_name("qwen3-30b-h20")
    )
    # the engine's KV block size in tokens (vLLM --block-size; the CRD's model.blockSize, the
    # picker's --block-size and config key blockTokens)
    block_tokens: int = 16
    seed: int = 0
    # Seconds to load one token's KV from the global tier (SMetric's ``meets`` with a global KV
    # tier, see smetric.policy.smetric); None = local hits only (algorithms.md as written).
    global_fetch_s_per_token: float | None = None
    # KV tokens each engine pod contributes to the global tier (the operator: its Mooncake
    # segment / KV bytes per token); None = a fully provisioned tier. The picker bounds its
    # estimate of g without KV events by this x the engines it discovers (so scaling the pool
    # needs no new config; smetric.epp.server.tier_facts); a policy-owned
    # tiered.globalCapacityTokens (a fixed total) wins.
    global_segment_tokens: int | None = None
    # the global tier's write unit in tokens (LMCache chunk_size; whole chunks only are stored):
    # the write estimate of g records a routed prompt's whole chunks; None = the whole prompt
    global_chunk_tokens: int | None = None
    own: tuple[ParamsModel, ...] = ()

    def __post_init__(self) -> None:
        """Reject context values no policy can use (the ranges ``params_from_mapping`` enforces)."""
        checks = (
            (
                self.mode in ("colocated", "disaggregated"),
                f"mode must be colocated|disaggregated, got {self.mode!r}",
            ),
            (self.block_tokens >= 1, f"block_tokens must be >= 1, got {self.block_tokens}"),
            (
                self.global_fetch_s_per_token is None
                or (math.isfinite(self.global_fetch_s_per_token) and self.global_fetch_s_per_token >= 0),
                f"global_fetch_s_per_token must be None or finite and >= 0, got {self.global_fetch_s_per_token}",
            ),
            (
                self.global_segment_tokens is None or self.global_segment_tokens >= 1,
                f"global_segment_tokens must be None or >= 1, got {self.global_segment_tokens}",
            ),
            (
                self.global_chunk_tokens is None or self.global_chunk_tokens >= 1,
                f"global_chunk_tokens must be None or >= 1, got {self.global_chunk_tokens}",
            ),
            (
                len({type(m) for m in self.own}) == len(self.own),
                "own holds at most one instance per Params model",
            ),
        )
        errors = [msg for ok, msg in checks if not ok]
        if errors:
            raise ValueError("invalid PolicyParams: " + "; ".join(errors))

    def get(self, model: type[M]) -> M:
        """The instance of ``model`` in :attr:`own`, else ``model()`` (its defaults)."""
        for m in self.own:
            if type(m) is model:
                return m
        return model()

    def with_own(self, *models: ParamsModel) -> PolicyParams:
        """These params with ``models`` replacing any instance of the same class in :attr:`own`."""
        kinds = {type(m) for m in models}
        return replace(self, own=tuple(m for m in self.own if type(m) not in kinds) + models)


@dataclass(frozen=True, slots=True)
class Decision:
    """A routing decision. ``target`` and ``fallbacks`` index the endpoint sequence given to
    :meth:`Policy.pick`; ``scores`` are per endpoint, lower is better, ``inf`` = not a candidate."""

    target: int
    reason: str
    scores: tuple[float, ...] = ()
    fallbacks: tuple[int, ...] = ()


class Policy(Protocol):
    """Pick one endpoint for a request. Implementations keep no I/O; a baseline that needs
    memory (round-robin counter, llm-d session table) keeps it inside the instance."""

    name: str

    def pick(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> Decision: ...

    def on_dispatch(self, request: RequestView, endpoint: str) -> None:
        """Told where the request finally went (after framework filtering); default no-op."""
        ...
