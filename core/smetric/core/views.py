"""What a routing policy sees: one request view and immutable per-endpoint snapshots.

Both the simulator and the picker build these from their own state, so a policy cannot tell
which one it runs in. Units are in the field names.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class RequestView:
    """The routing-relevant facts of one request.

    ``est_hit_tokens``: prompt length up to and including the last assistant message (what the
    instance that served the previous turn should still hold); 0 on a first turn.
    ``session_id`` is only for the ``llmd-session`` baseline (the replay supplies the true id);
    SMetric never reads it.
    """

    request_id: str
    prompt_tokens: int
    turn: int = 0
    est_hit_tokens: int = 0
    session_id: str | None = None
    ttft_slo_s: float | None = None  # per-request override (x-slo-ttft-ms)
    tpot_slo_s: float | None = None  # per-request override (x-slo-tpot-ms)
    sheddable: bool = False


@dataclass(frozen=True, slots=True)
class EndpointSnapshot:
    """One candidate endpoint as the router sees it at decision time.

    ``local_hit_tokens`` is c[i] (GPU-tier prefix hit of *this* request's prompt).
    ``queued_prefill_tokens`` / ``queued_prefill_cost`` are q[i] from the router's dispatch
    ledger (uncached prompt tokens / cost-model seconds dispatched but not yet first-tokened).
    ``queued_fetch_s`` is the global-tier fetch time of that queued work (kept apart from the
    cost: it runs on the link, not the GPU).
    ``global_hit_tokens`` is g[i]: the prompt prefix the global tier can supply to *this*
    endpoint (0 without a global tier); the tokens really computed there are
    ``L - max(c[i], g[i])`` (:func:`smetric.router.dispatch_work`).
    ``prefill_speed`` converts cost to wall time (1.0 = as the cost model predicts; learned online).
    ``stale`` marks an endpoint whose metrics are older than the staleness threshold; policies
    treat it as saturated (documented fallback) and never pick it while a fresh one exists.
    """

    name: str
    local_hit_tokens: int = 0
    queued_prefill_tokens: float = 0.0
    queued_prefill_cost: float = 0.0
    running: int = 0
    waiting: int = 0
    kv_usage: float = 0.0
    kv_capacity_tokens: int = 0
    prefill_speed: float = 1.0
    stale: bool = False
    global_hit_tokens: int = 0
    queued_fetch_s: float = 0.0
    # Read by ``smetric-tiered`` (0 / "" where the source does not know them): seconds until this
    # endpoint's link to the global tier is free, the node it runs on, and the session KV
    # recently written into its local tier (decayed tokens, smetric.policy.footprint).
    link_backlog_s: float = 0.0
    node: str = ""
    session_kv_tokens: float = 0.0

    @property
    def batch_size(self) -> int:
        """b[i] = running + waiting."""
        return self.running + self.waiting
