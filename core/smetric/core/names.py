"""Names shared across the picker, the operator, the simulator and the CRD (one place)."""

from __future__ import annotations

# Policy names are not here: smetric.policy.registry (POLICY_NAMES, BASELINE_POLICIES,
# ABLATION_POLICIES) derives them from the one registry of (name, class, Params).

MODES: tuple[str, ...] = ("colocated", "disaggregated")

# Decision reasons (the picker's metric label values).
REASON_STICK = "stick"
REASON_MIGRATE = "migrate"
REASON_BALANCE = "balance"
REASON_EVICTED = "evicted"
# the framework's overload fallback sent it to the least-loaded engine (smetric.policy.pieces)
REASON_OVERLOAD = "overload"
REASONS: tuple[str, ...] = (REASON_STICK, REASON_MIGRATE, REASON_BALANCE, REASON_EVICTED, REASON_OVERLOAD)

# Pod role labels (llm-d convention).
ROLE_LABEL = "llm-d.ai/role"
ROLE_PREFILL = "prefill"
ROLE_DECODE = "decode"
ROLE_BOTH = "prefill-decode"
