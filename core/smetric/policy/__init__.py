"""Routing policies: pure code, no I/O. The picker and the simulator import exactly this.

Call policies through :class:`Router` (stale handling, validation, fallbacks) and build them
with :func:`make_policy` / :func:`params_from_mapping`.
"""

from smetric.policy.base import Decision, DecodeStepModel, Policy, PolicyParams
from smetric.policy.framework import InvalidDecisionError, NoEndpointError, PolicyError, Router
from smetric.policy.params_mapping import fetch_s_per_token, params_from_mapping
from smetric.policy.registry import known_policies, make_policy

__all__ = [
    "Decision",
    "DecodeStepModel",
    "InvalidDecisionError",
    "NoEndpointError",
    "Policy",
    "PolicyError",
    "PolicyParams",
    "Router",
    "fetch_s_per_token",
    "known_policies",
    "make_policy",
    "params_from_mapping",
]
