"""Routing policies: pure code, no I/O. The picker and the simulator import exactly this."""

from smetric.policy.base import Decision, Policy, PolicyParams

__all__ = ["Decision", "Policy", "PolicyParams"]
