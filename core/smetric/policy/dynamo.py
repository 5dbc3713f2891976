"""NVIDIA Dynamo's KV router cost (``overlap_score_weight = 1``, temperature 0).

``logit[i] = q_prefill_blocks[i] + new_blocks[i] + decode_blocks[i]``, lowest wins, where with
``B = PolicyParams.block_tokens``: ``q_prefill_blocks = q_tokens[i] / B`` (the router's queued
prefill ledger), ``new_blocks = (L - overlap_blocks[i] * B) / B`` with ``overlap_blocks =
floor(c[i] / B)`` (only whole cached blocks count, as block hashes match whole blocks), and
``decode_blocks = active_kv_tokens[i] / B`` (``kv_usage * capacity``). Ties round-robin
(Dynamo picks uniformly among equal minima). Reason ``balance``.
"""

from __future__ import annotations

from collections.abc import Sequence

from smetric.core.names import REASON_BALANCE
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import Decision, PolicyParams
from smetric.policy.estimates import decode_load_tokens, local_hit, nonneg, prompt_tokens
from smetric.policy.select import RoundRobinTies


class Dynamo:
    name = "dynamo"

    def __init__(self, params: PolicyParams) -> None:
        self._block = params.block_tokens
        self._ties = RoundRobinTies()

    def pick(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> Decision:
        bs = self._block
        n = prompt_tokens(request)
        scores = tuple(
            (
                nonneg(ep.queued_prefill_tokens)
                + n
                - (local_hit(request, ep) // bs) * bs
                + decode_load_tokens(ep)
            )
            / bs
            for ep in endpoints
        )
        return Decision(self._ties.argmin(scores), REASON_BALANCE, scores)

    def on_dispatch(self, request: RequestView, endpoint: str) -> None:
        """Stateless (beyond the tie counter)."""
