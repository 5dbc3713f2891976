"""Names shared across the picker, the operator, the simulator and the CRD (one place)."""

from __future__ import annotations

POLICY_NAMES: tuple[str, ...] = (
    "smetric",
    "smetric-basic",
    "smetric-overload",
    "smetric-slo-tokens",
    "smetric-tiered",
    "lmetric",
    "bailian",
    "load-balance",
    "llmd-session",
    "llmd-slo",
    "preble",
    "dynamo",
    "round-robin",
    "random",
)
BASELINE_POLICIES: tuple[str, ...] = tuple(n for n in POLICY_NAMES if not n.startswith("smetric"))
ABLATION_POLICIES: tuple[str, ...] = ("smetric-basic", "smetric-overload", "smetric-slo-tokens", "smetric")

MODES: tuple[str, ...] = ("colocated", "disaggregated")

# Decision reasons (the picker's metric label values).
REASON_STICK = "stick"
REASON_MIGRATE = "migrate"
REASON_BALANCE = "balance"
REASON_EVICTED = "evicted"
REASONS: tuple[str, ...] = (REASON_STICK, REASON_MIGRATE, REASON_BALANCE, REASON_EVICTED)

# Pod role labels (llm-d convention).
ROLE_LABEL = "llm-d.ai/role"
ROLE_PREFILL = "prefill"
ROLE_DECODE = "decode"
ROLE_BOTH = "prefill-decode"
