"""kgateway (v2.1.0) gets a ``TrafficPolicy`` ``<pool>-timeouts`` on the pool's HTTPRoute whose
``timeouts.streamIdle`` lets a cold prefill of the maximum model length through (kgateway sets it as
the Envoy route's ``idle_timeout``; Envoy's default stream idle timeout is 5 minutes), and nothing
else; no other provider gets one. The object fits the TrafficPolicy CRD of kgateway at the v2.1
release cut and of the v2.2.x branch (``tests/support/crd_schemas``, sources in
``render_timeouts``'s docstring), and that schema refuses a misnamed field."""

from __future__ import annotations

import copy
from typing import Any

import jsonschema
import pytest

from smetric.core.gatewaytimeouts import whole_seconds
from smetric.core.presets import PRESETS
from smetric.operator.render_timeouts import pool_timeouts
from smetric.operator.spec import parse_spec
from tests.support.crd_schema import (
    SCHEMAS,
    CelRuleError,
    load_crd,
    source_of,
    validate_against,
    validate_crd,
)
from tests.support.operator_render import by_name, render, spec

PROVIDERS = ("none", "kgateway", "envoy-gateway", "istio", "gke")
PRESET = PRESETS["qwen3-30b-h20"]  # the model of tests.support.operator_render.spec


def _kgateway(**over: Any) -> dict[str, Any]:
    return spec(gateway={"parentRef": {"name": "gw"}, "provider": "kgateway"}, **over)


def _seconds(value: str) -> int:
    assert value.endswith("s") and value[:-1].isdigit(), value
    return int(value[:-1])


def test_kgateway_gets_a_traffic_policy_with_the_stream_idle_bound() -> None:
    raw = _kgateway()
    policy = by_name(render(raw), "TrafficPolicy", "p-timeouts")
    t = pool_timeouts(parse_spec(raw))
    assert policy["apiVersion"] == "gateway.kgateway.dev/v1alpha1"
    assert policy["metadata"]["namespace"] == "ns"
    assert policy["metadata"]["ownerReferences"][0]["kind"] == "SMetricPool"
    assert policy["spec"] == {
        "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": "p"}],
        "timeouts": {"streamIdle": f"{whole_seconds(t.stream_idle_s)}s"},
    }
    # A cold prefill of the whole context (262,144 tokens, 584 s on one H20), twice: a retry after a
    # frozen first attempt's per-try idle timeout still gets a whole prefill.
    cold_s = PRESET.cost_model.cost(262_144, 262_144)
    assert _seconds(policy["spec"]["timeouts"]["streamIdle"]) >= t.stream_idle_s >= 2 * cold_s > 300


def test_the_stream_idle_bound_follows_the_pools_max_model_len() -> None:
    short = by_name(
        render(_kgateway(model={"name": PRESET.model.name, "maxModelLen": 32_768})),
        "TrafficPolicy",
        "p-timeouts",
    )
    full = by_name(render(_kgateway()), "TrafficPolicy", "p-timeouts")
    short_s = _seconds(short["spec"]["timeouts"]["streamIdle"])
    assert short_s >= 2 * PRESET.cost_model.cost(32_768, 32_768)
    assert short_s < _seconds(full["spec"]["timeouts"]["streamIdle"])


@pytest.mark.parametrize("provider", PROVIDERS)
def test_only_kgateway_gets_a_traffic_policy(provider: str) -> None:
    children = render(spec(gateway={"parentRef": {"name": "gw"}, "provider": provider}))
    policies = [c for c in children if c["kind"] == "TrafficPolicy"]
    assert len(policies) == (1 if provider == "kgateway" else 0)
    assert not [c for c in render(spec()) if c["kind"] == "TrafficPolicy"]  # no gateway at all


def test_the_traffic_policy_fits_the_kgateway_crds() -> None:
    policy = by_name(render(_kgateway()), "TrafficPolicy", "p-timeouts")
    validate_crd(policy)
    assert source_of("TrafficPolicy")["commit"] == "8b11de40dc328bf7f05a6c67f9e23ec3b6c686e8"
    later = load_crd(SCHEMAS / "later" / "trafficpolicy-v2.2.x.json")
    validate_against(later, policy)


def test_the_kgateway_crd_refuses_what_the_api_server_refuses() -> None:
    """A misnamed field (Envoy Gateway's spelling), a fractional duration, a target without its
    group and a target kind kgateway does not attach to all fail."""
    policy = by_name(render(_kgateway()), "TrafficPolicy", "p-timeouts")
    misnamed = copy.deepcopy(policy)
    misnamed["spec"]["timeouts"] = {"streamIdleTimeout": policy["spec"]["timeouts"]["streamIdle"]}
    with pytest.raises(jsonschema.ValidationError, match="streamIdleTimeout"):
        validate_crd(misnamed)
    fractional = copy.deepcopy(policy)
    fractional["spec"]["timeouts"]["streamIdle"] = "1461.5s"
    with pytest.raises(CelRuleError, match="invalid duration value"):
        validate_crd(fractional)
    groupless = copy.deepcopy(policy)
    del groupless["spec"]["targetRefs"][0]["group"]
    with pytest.raises(jsonschema.ValidationError, match="group"):
        validate_crd(groupless)
    service = copy.deepcopy(policy)
    service["spec"]["targetRefs"][0].update(group="", kind="Service")
    with pytest.raises(CelRuleError, match="targetRefs may only reference"):
        validate_crd(service)
