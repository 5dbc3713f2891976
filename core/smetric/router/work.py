"""What one dispatch really costs the endpoint it goes to.

A request of ``L`` prompt tokens sent to endpoint ``i`` finds ``c[i]`` tokens in that endpoint's
GPU tier (local hit) and can load ``g[i]`` tokens from the global tier (global hit: a prefix the
global tier holds). The engine loads ``max(c, g) - c`` tokens over the link (LMCache/Mooncake
retrieve) and computes only ``L - max(c, g)``. The dispatch ledger must be charged exactly that:

* ``cost_s``  = ``cost(L - max(c, g), L)``: cost-model seconds of the tokens really computed
  (GPU work; what the online prefill-rate estimate divides by the observed TTFT);
* ``fetch_s`` = ``(max(c, g) - c) * global_fetch_s_per_token``: link time of the fetched tokens,
  kept apart so it never enters the prefill-rate estimate or the GPU queue.

Charging ``cost(L - c, L)`` instead, as if the global tier supplied nothing, would book a
100k-token session moved to another endpoint ~88 s of prefill instead of ~2 s of fetch plus its new
tokens (phantom queued work): ``tests/unit/policy/test_router_state.py`` checks the split.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from smetric.core.costmodel import CostModel
from smetric.core.views import RequestView


@dataclass(frozen=True, slots=True)
class DispatchWork:
    """The work one dispatch puts on its endpoint (all token counts clamped to ``[0, L]``)."""

    prompt_tokens: int
    local_hit_tokens: int  # c: already in the endpoint's GPU tier
    fetched_tokens: int  # max(c, g) - c: loaded from the global tier
    computed_tokens: int  # L - max(c, g): prefilled on the GPU
    cost_s: float  # cost-model seconds of the computed tokens
    fetch_s: float  # link seconds of the fetched tokens


def _tokens(x: float, upper: int) -> int:
    if not math.isfinite(x) or x <= 0:
        return 0
    return min(int(x), upper)


def dispatch_work(
    cost_model: CostModel,
    prompt_tokens: int,
    local_hit_tokens: int,
    global_hit_tokens: int = 0,
    fetch_s_per_token: float | None = None,
) -> DispatchWork:
    """The one function both the picker and the simulator charge their ledger with.

    Bad inputs are sanitised, never propagated: negative or non-finite counts are 0, hits are
    clamped to the prompt, an unusable ``fetch_s_per_token`` (``None``, negative, NaN) counts
    the fetched tokens at 0 s (they are still not charged as compute: the global tier supplies
    them whatever the link speed).
    """
    L = _tokens(prompt_tokens, 2**62)
    c = _tokens(local_hit_tokens, L)
    h = max(c, _tokens(global_hit_tokens, L))
    fetched, computed = h - c, L - h
    per_token = (
        fetch_s_per_token if fetch_s_per_token is not None and math.isfinite(fetch_s_per_token) else 0.0
    )
    return DispatchWork(
        prompt_tokens=L,
        local_hit_tokens=c,
        fetched_tokens=fetched,
        computed_tokens=computed,
        cost_s=cost_model.cost(computed, L),
        fetch_s=fetched * max(0.0, per_token),
    )


def estimated_global_hit(request: RequestView, global_fetch_s_per_token: float | None) -> int:
    """g for a router that keeps no model of the global tier's content: with a fully provisioned
    global tier configured (``global_fetch_s_per_token`` set) the session's previous turn,
    ``min(est_hit, L)``, is assumed there; without one, 0. The same assumption as SMetric's
    ``meets`` (:func:`smetric.policy.estimates.session_hit`). A first turn (``est_hit`` 0) gets no
    global credit even if its system prompt is stored.

    Neither tool builds its snapshots from it in a pool with a tier any more: the picker's tier
    facts and the simulator's tier view give every policy g from the one tier model
    (docs/overload.md, 8e: this estimate credits the previous answer, which LMCache does not
    store, and turns that were refused and never written). It remains the simulator's
    ``--framework-g session`` ablation, which reproduces the runs before that fix, and the
    picker's g without a tier (0)."""
    if global_fetch_s_per_token is None:
        return 0
    return min(max(0, request.est_hit_tokens), max(0, request.prompt_tokens))
