"""The router core shared by the picker (``smetric.epp``) and the simulator (``smetric.sim``).

* :func:`dispatch_work` -- what one dispatch costs its endpoint (computed tokens' cost, global-tier
  fetch seconds apart): the one function both charge their dispatch ledger with;
* :class:`RouterCore` -- dispatch ledger, staleness, online prefill-rate learning, saturation.
"""

from smetric.router.ledger import DispatchLedger, LedgerEntry
from smetric.router.prefill_rate import PrefillRateEstimator
from smetric.router.state import DEFAULT_STALENESS_S, Gauges, RouterCore, Saturation, ScrapedGauges
from smetric.router.work import DispatchWork, dispatch_work, estimated_global_hit

__all__ = [
    "DEFAULT_STALENESS_S",
    "DispatchLedger",
    "DispatchWork",
    "Gauges",
    "LedgerEntry",
    "PrefillRateEstimator",
    "RouterCore",
    "Saturation",
    "ScrapedGauges",
    "dispatch_work",
    "estimated_global_hit",
]
