"""The two-tier facts are built for a policy whose registry entry says it reads them."""

from __future__ import annotations

import pytest

from smetric.policy.registry import BUILTIN, REGISTRY, PolicyEntry, uses_tier_view
from smetric.policy.round_robin import RoundRobin


def test_smetric_and_smetric_tiered_read_the_tier_view() -> None:
    # SMetric reads g from the global tier's content (KV events or the capacity-bounded write
    # estimate), not from "the previous turn is always there" (docs/evidence.md, small tier);
    # its paper ablations keep the router core's estimate
    assert [e.name for e in REGISTRY if e.uses_tier_view and e.kind != "baseline+pieces"] == [
        "smetric",
        "smetric-tiered",
    ]
    assert uses_tier_view("smetric-tiered")
    assert uses_tier_view("smetric")
    assert not uses_tier_view("smetric-basic")


def test_flag_is_read_from_the_given_registry_and_unknown_names_fail() -> None:
    extra = PolicyEntry("rr-tiered", RoundRobin, uses_tier_view=True)
    assert uses_tier_view("rr-tiered", (*BUILTIN, extra))
    with pytest.raises(ValueError, match="unknown routing policy"):
        uses_tier_view("no-such-policy")


def test_policies_carry_no_probe_attribute() -> None:
    assert not any(hasattr(e.factory, "uses_tier_view") for e in REGISTRY)
