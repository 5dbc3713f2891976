"""The policy extension point: one small interface, frozen inputs, a frozen decision."""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from typing import Literal, Protocol

from smetric.core.costmodel import CostModel
from smetric.core.presets import PRESETS, get_preset
from smetric.core.slo import SloConfig
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.tiered_params import TieredParams

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


@dataclass(frozen=True, slots=True)
class PolicyParams:
    """Every tunable of every policy, with the paper's defaults."""

    mode: Mode = "colocated"
    slack: float = 1.0
    hit_ratio: float = 0.5
    overload: float = 2.0
    bailian_lambda: float = 0.7
    preble_hit_fraction: float = 0.5
    preble_imbalance_guard: int = 8
    slo: SloConfig = field(default_factory=lambda: _DEFAULT_PRESET.slo)
    cost_model: CostModel = field(default_factory=lambda: _DEFAULT_PRESET.cost_model)
    decode_step: DecodeStepModel = field(
        default_factory=lambda: DecodeStepModel.from_preset_name("qwen3-30b-h20")
    )
    chunk_tokens: int = 8192
    block_tokens: int = 16
    seed: int = 0
    session_table_size: int = 65_536  # llmd-session: LRU bound on its session -> endpoint table
    # SMetric ``meets`` with a global KV tier (opt-in, see smetric.policy.smetric): seconds to load
    # one token's KV from the global tier; None = local hits only (algorithms.md as written).
    global_fetch_s_per_token: float | None = None
    # smetric-tiered's mechanism switches and its two own parameters (smetric.policy.tiered_params)
    tiered: TieredParams = field(default_factory=TieredParams)

    def __post_init__(self) -> None:
        """Reject values no policy can use (the same ranges ``params_from_mapping`` enforces)."""
        checks = (
            (
                self.mode in ("colocated", "disaggregated"),
                f"mode must be colocated|disaggregated, got {self.mode!r}",
            ),
            (math.isfinite(self.slack) and self.slack > 0, f"slack must be finite and > 0, got {self.slack}"),
            (0 < self.hit_ratio < 1, f"hit_ratio must be in (0, 1), got {self.hit_ratio}"),
            (
                math.isfinite(self.overload) and self.overload >= 1,
                f"overload must be >= 1, got {self.overload}",
            ),
            (0 <= self.bailian_lambda <= 1, f"bailian_lambda must be in [0, 1], got {self.bailian_lambda}"),
            (
                0 < self.preble_hit_fraction < 1,
                f"preble_hit_fraction must be in (0, 1), got {self.preble_hit_fraction}",
            ),
            (
                self.preble_imbalance_guard >= 0,
                f"preble_imbalance_guard must be >= 0, got {self.preble_imbalance_guard}",
            ),
            (self.chunk_tokens >= 1, f"chunk_tokens must be >= 1, got {self.chunk_tokens}"),
            (self.block_tokens >= 1, f"block_tokens must be >= 1, got {self.block_tokens}"),
            (self.session_table_size >= 1, f"session_table_size must be >= 1, got {self.session_table_size}"),
            (
                self.global_fetch_s_per_token is None
                or (math.isfinite(self.global_fetch_s_per_token) and self.global_fetch_s_per_token >= 0),
                f"global_fetch_s_per_token must be None or finite and >= 0, got {self.global_fetch_s_per_token}",
            ),
        )
        errors = [msg for ok, msg in checks if not ok]
        if errors:
            raise ValueError("invalid PolicyParams: " + "; ".join(errors))


@dataclass(frozen=True, slots=True)
class Decision:
    """A routing decision. ``target`` and ``fallbacks`` index the endpoint sequence given to
    :meth:`Policy.pick`; ``scores`` are per endpoint, lower is better, ``inf`` = not a candidate.

    ``saturated`` is set by :class:`smetric.policy.framework.Router` when every endpoint was
    stale and the decision was taken among saturated endpoints (the picker may shed a
    sheddable request with 429 instead of dispatching it)."""

    target: int
    reason: str
    scores: tuple[float, ...] = ()
    fallbacks: tuple[int, ...] = ()
    saturated: bool = False


class Policy(Protocol):
    """Pick one endpoint for a request. Implementations keep no I/O; a baseline that needs
    memory (round-robin counter, llm-d session table) keeps it inside the instance."""

    name: str

    def pick(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> Decision: ...

    def on_dispatch(self, request: RequestView, endpoint: str) -> None:
        """Told where the request finally went (after framework filtering); default no-op."""
        ...
