"""The paper-literal SMetric (paper §4.2, Fig. 13, Appendix B; ``/work/shared/reference/algorithms.md``).

SMetric's rule with none of this project's additions: the balance score and ``meets`` estimate local hits only
(``(q[i] + cost(L - c[i], L)) / rate[i]``), and when no endpoint meets, the request "still routes by
KV$-awareness" (a cached follow-up sticks). It is ``smetric`` with ``balanceEstimate: local``, ``meetsEstimate:
local``, ``nobodyMeets: stick`` fixed, registered under its own name so a sweep can hold it beside the product
default (``smetric``: the same rule + the framework pieces' tier-aware estimate and overload fallback,
:mod:`smetric.policy.pieces`). HIT_RATIO and SLACK are read as for ``smetric``.
"""

from __future__ import annotations

from smetric.policy.base import PolicyParams
from smetric.policy.params import SMetricParams
from smetric.policy.smetric import SMetric


class SMetricPaper(SMetric):
    name = "smetric-paper"

    def __init__(self, params: PolicyParams) -> None:
        own = params.get(SMetricParams)
        literal = own.model_copy(
            update={"balance_estimate": "local", "meets_estimate": "local", "nobody_meets": "stick"}
        )
        super().__init__(params.with_own(literal))
