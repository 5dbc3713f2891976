"""Policy registry: the kebab-case names of :data:`smetric.core.names.POLICY_NAMES` to factories.

``make_policy(name, params)`` builds a fresh policy instance (each instance owns its own
tie-break counter / session table / RNG); an unknown name raises ``ValueError`` listing the
known ones. The mapping of factories is immutable.
"""

from __future__ import annotations

from collections.abc import Callable, Mapping
from types import MappingProxyType

from smetric.core.names import POLICY_NAMES
from smetric.policy.bailian import Bailian
from smetric.policy.base import Policy, PolicyParams
from smetric.policy.dynamo import Dynamo
from smetric.policy.llmd_session import LlmdSession
from smetric.policy.llmd_slo import LlmdSlo
from smetric.policy.lmetric import LMetric
from smetric.policy.load_balance import LoadBalance
from smetric.policy.preble import Preble
from smetric.policy.random_pick import RandomPick
from smetric.policy.round_robin import RoundRobin
from smetric.policy.smetric import SMetric
from smetric.policy.smetric_basic import SMetricBasic
from smetric.policy.smetric_overload import SMetricOverload
from smetric.policy.smetric_slo_tokens import SMetricSloTokens
from smetric.policy.smetric_tiered import SMetricTiered

Factory = Callable[[PolicyParams], Policy]

FACTORIES: Mapping[str, Factory] = MappingProxyType(
    {
        "smetric": SMetric,
        "smetric-basic": SMetricBasic,
        "smetric-overload": SMetricOverload,
        "smetric-slo-tokens": SMetricSloTokens,
        "smetric-tiered": SMetricTiered,
        "lmetric": LMetric,
        "bailian": Bailian,
        "load-balance": LoadBalance,
        "llmd-session": LlmdSession,
        "llmd-slo": LlmdSlo,
        "preble": Preble,
        "dynamo": Dynamo,
        "round-robin": RoundRobin,
        "random": RandomPick,
    }
)


def known_policies() -> tuple[str, ...]:
    """Registered names, in the catalogue's order."""
    return tuple(n for n in POLICY_NAMES if n in FACTORIES)


def make_policy(name: str, params: PolicyParams | None = None) -> Policy:
    """A fresh instance of the policy registered as ``name``."""
    try:
        factory = FACTORIES[name]
    except KeyError:
        raise ValueError(f"unknown routing policy {name!r}; known: {', '.join(known_policies())}") from None
    return factory(PolicyParams() if params is None else params)
