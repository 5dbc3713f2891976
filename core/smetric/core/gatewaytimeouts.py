"""Gateway timeouts derived from the pool's longest legitimate silence.

A healthy engine is silent from the moment it accepts a request until its first byte: the prefill.
The longest such silence is a cold prefill of the pool's maximum model length ``L``: ``P =
cost(L, L)`` on the pool's cost model (:mod:`smetric.core.costmodel`, paper Eq. 1; for the default
Qwen3-Coder-30B-A3B on one H20 and ``L`` = 262,144 tokens, 584 s). Every gateway timeout that can
cut a silent stream must let it through:

* ``per_try_idle_s`` = ``margin`` x ``P``: Envoy's per-try idle timeout resets an attempt that is
  silent that long and retries it on the picker's next fallback (a frozen engine). Above every
  legitimate silence, a request an engine accepted is re-sent elsewhere only when that engine
  stopped answering.
* ``stream_idle_s`` = ``per_try_idle_s`` + ``margin`` x ``P``: the stream idle timeout (HCM
  ``stream_idle_timeout``, route ``idle_timeout``, Envoy Gateway / kgateway ``streamIdle``). Envoy
  does not restart it for a retry, so a request whose first attempt waited out the per-try idle
  timeout on a frozen engine still has a whole maximum-length prefill for the retry's first byte
  (tests/integration/envoy/test_envoy_frozen_engine.py shows the retry gets only what is left).
* ``route_s`` = ``stream_idle_s`` + ``generation_s``: the whole request (Envoy route ``timeout``,
  Gateway API ``HTTPRoute timeouts.request``, GKE ``timeoutSec``) -- the silences above, then a
  generation of ``max_output_tokens`` at the SLO's time per output token.

``margin`` (1.25) is headroom for an engine slower than modelled and a prefill whose chunks share
steps with others' (vLLM's chunked-prefill token budget is per step, not per request): an assumption,
fixed here, not a measurement. ``max_output_tokens`` (65,536) is the output length the Qwen3-Coder
model card suggests for most queries; the TPOT (20 ms, :data:`smetric.core.slo.PAPER_SLO_30B`) is
the SLO's. ``time_scale`` multiplies every duration, as the emulator's ``--time-scale`` does.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from smetric.core.costmodel import CostModel
from smetric.core.presets import PRESETS, InstancePreset

MARGIN = 1.25
MAX_OUTPUT_TOKENS = 65_536
DEFAULT_PRESET = "qwen3-30b-h20"  # the picker's default cost model (smetric.policy.base)


@dataclass(frozen=True, slots=True)
class GatewayTimeouts:
    """Seconds. ``longest_prefill_s``: the cold prefill of ``max_model_len`` tokens they derive from."""

    max_model_len: int
    longest_prefill_s: float
    per_try_idle_s: float
    stream_idle_s: float
    route_s: float

    @classmethod
    def derive(
        cls,
        cost_model: CostModel,
        max_model_len: int,
        *,
        tpot_s: float,
        time_scale: float = 1.0,
        margin: float = MARGIN,
        max_output_tokens: int = MAX_OUTPUT_TOKENS,
    ) -> GatewayTimeouts:
        if max_model_len < 1:
            raise ValueError(f"max model length must be >= 1 token, got {max_model_len}")
        if not (time_scale > 0 and margin >= 1.0 and tpot_s >= 0 and max_output_tokens >= 0):
            raise ValueError(
                f"need time_scale > 0, margin >= 1, tpot_s >= 0, max_output_tokens >= 0; got "
                f"{time_scale}, {margin}, {tpot_s}, {max_output_tokens}"
            )
        prefill_s = cost_model.cost(max_model_len, max_model_len) * time_scale
        if not math.isfinite(prefill_s) or prefill_s <= 0:
            raise ValueError(f"the cost model gives no finite prefill time for {max_model_len} tokens")
        per_try_s = margin * prefill_s
        stream_idle_s = per_try_s + margin * prefill_s
        generation_s = max_output_tokens * tpot_s * time_scale
        return cls(max_model_len, prefill_s, per_try_s, stream_idle_s, stream_idle_s + generation_s)

    @classmethod
    def for_preset(
        cls, preset: InstancePreset, max_model_len: int | None = None, *, time_scale: float = 1.0
    ) -> GatewayTimeouts:
        """The preset's cost model and TPOT SLO; ``max_model_len`` default: the model's context."""
        length = max_model_len if max_model_len is not None else preset.model.max_context_tokens
        return cls.derive(preset.cost_model, length, tpot_s=preset.slo.tpot_s, time_scale=time_scale)


def default_timeouts() -> GatewayTimeouts:
    """The picker's default cost model at its model's full context (262,144 tokens)."""
    return GatewayTimeouts.for_preset(PRESETS[DEFAULT_PRESET])


def whole_seconds(seconds: float) -> int:
    """Rounded up: Kubernetes duration fields (Gateway API ``Duration``, GKE ``timeoutSec``) take
    whole seconds here, and a timeout must never end below what it was derived to let through."""
    return max(1, math.ceil(seconds))
