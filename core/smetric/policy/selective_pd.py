"""Selective P/D: whether a request takes the prefill hop, from the decode pod's prefix hit.

llm-d's ``prefix-based-pd-decider`` (llm-d-inference-scheduler v0.8.0,
``pkg/epp/framework/plugins/scheduling/profilehandler/disagg/prefix_based_pd_decider.go``): the
decode pod is chosen first; the request is disaggregated (a prefill pod computes the prompt and
the KV moves to the decode pod) only when the part of the prompt the decode pod does *not*
already hold is at least ``nonCachedTokens`` long. A short uncached suffix is cheaper to compute
on the decode pod itself than a remote prefill plus a KV transfer. ``nonCachedTokens`` 0 disables
disaggregation (upstream's meaning: every request stays on its decode pod); a prompt shorter than
the threshold is never disaggregated. llm-d's sample P/D config sets 16.

The picker (:mod:`smetric.epp.server.decide`) and the simulator's P/D pool
(:mod:`smetric.sim.pd_pool`) both decide with :func:`take_prefill_hop`.
"""

from __future__ import annotations

from dataclasses import dataclass


def take_prefill_hop(prompt_tokens: int, decode_hit_tokens: int, non_cached_tokens: int | None) -> bool:
    """``True``: prefill on a prefill pod; ``False``: the decode pod computes the uncached suffix.
    ``non_cached_tokens`` ``None`` keeps every request disaggregated (P/D without a decider)."""
    if non_cached_tokens is None:
        return True
    if non_cached_tokens == 0 or prompt_tokens < non_cached_tokens:
        return False
    return prompt_tokens - min(decode_hit_tokens, prompt_tokens) >= non_cached_tokens


@dataclass(frozen=True, slots=True)
class PdDecider:
    """The decider as configured (``pdDisaggregation.nonCachedTokens``)."""

    non_cached_tokens: int | None = None

    def __post_init__(self) -> None:
        if self.non_cached_tokens is not None and self.non_cached_tokens < 0:
            raise ValueError(f"nonCachedTokens must be >= 0, got {self.non_cached_tokens}")

    @property
    def selective(self) -> bool:
        return self.non_cached_tokens is not None

    def take_prefill_hop(self, prompt_tokens: int, decode_hit_tokens: int) -> bool:
        return take_prefill_hop(prompt_tokens, decode_hit_tokens, self.non_cached_tokens)
