"""No gateway object the operator renders can cut a request whose engine is quiet for a whole cold
prefill of the pool's maximum model length, even after a retry: every timeout in the routing objects
of every provider is off or at least the per-try idle + 1.25 x that prefill
(``render_timeouts.pool_timeouts``), the route's request timeout and GKE's backend timeout are the
derived whole-request bound, Envoy Gateway and kgateway get a route stream idle timeout (Envoy's
default, 5 minutes, is below a 262,144-token prefill), and nothing is rendered that bounds the picker
connection's idle time. The picker side (its gRPC server accepts the gateway's keepalive PINGs at
any rate) is shown through real Envoy by ``tests/integration/envoy/test_envoy_long_quiet*.py``; the
bundled Envoy's timeouts by ``tests/integration/envoy/test_envoy_long_prefill.py``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from smetric.core.presets import PRESETS
from smetric.operator.render_timeouts import pool_timeouts
from smetric.operator.spec import parse_spec
from tests.support.operator_render import render, spec

PROVIDERS = ("none", "kgateway", "envoy-gateway", "istio", "gke")
ROUTING_KINDS = {
    "InferencePool",
    "HTTPRoute",
    "DestinationRule",
    "HealthCheckPolicy",
    "GCPBackendPolicy",
    "BackendTrafficPolicy",
    "TrafficPolicy",
}
PRESET = PRESETS["qwen3-30b-h20"]  # the model of tests.support.operator_render.spec
MAX_PREFILL_S = PRESET.cost_model.cost(262_144, 262_144)  # 584 s
LONGEST_QUIET_S = 2 * MAX_PREFILL_S  # a frozen first attempt's per-try idle timeout, then the prefill
_DURATION = re.compile(r"^(\d+(?:\.\d+)?)(ms|s|m|h)$")
_UNIT_S = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def _timeouts(node: Any, path: str = "") -> Iterator[tuple[str, Any]]:
    """Every field whose name says it bounds time (timeout, idle, keepalive, interval)."""
    if isinstance(node, dict):
        for key, value in node.items():
            here = f"{path}.{key}"
            if isinstance(value, (dict, list)):
                yield from _timeouts(value, here)
            elif re.search(r"timeout|idle|keepalive|maxConnectionDuration|^request$", key, re.IGNORECASE):
                yield here, value
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _timeouts(value, f"{path}[{i}]")


def _seconds(value: Any) -> float:
    if isinstance(value, (int, float)):
        return float(value)
    m = _DURATION.match(str(value))
    assert m, f"unparsed duration {value!r}"
    return float(m.group(1)) * _UNIT_S[m.group(2)]


@pytest.mark.parametrize("provider", PROVIDERS)
@pytest.mark.parametrize("secure", [True, False])
def test_no_rendered_gateway_timeout_cuts_a_max_length_prefill(provider: str, secure: bool) -> None:
    raw = spec(gateway={"parentRef": {"name": "gw"}, "provider": provider}, router={"secureServing": secure})
    children = render(raw)
    routing = [c for c in children if c["kind"] in ROUTING_KINDS]
    assert {"InferencePool", "HTTPRoute"} <= {c["kind"] for c in routing}
    found = {
        f"{c['kind']}/{c['metadata']['name']}{path}": value
        for c in routing
        for path, value in _timeouts(c.get("spec", {}))
    }
    short = {k: v for k, v in found.items() if 0 < _seconds(v) < LONGEST_QUIET_S}
    assert not short, short
    t = pool_timeouts(parse_spec(raw))
    assert t.max_model_len == 262_144 and t.longest_prefill_s == pytest.approx(MAX_PREFILL_S)
    route = next(c for c in routing if c["kind"] == "HTTPRoute")
    request_s = _seconds(route["spec"]["rules"][0]["timeouts"]["request"])
    assert t.route_s <= request_s < t.route_s + 1  # the whole request is bounded, above every silence
    if provider == "gke":
        (policy,) = [c for c in routing if c["kind"] == "GCPBackendPolicy"]
        assert policy["spec"]["default"]["timeoutSec"] == request_s
    if provider == "envoy-gateway":  # its listener's stream idle timeout (5 min) would cut the prefill
        (policy,) = [c for c in routing if c["kind"] == "BackendTrafficPolicy"]
        assert policy["spec"]["targetRefs"][0] == {
            "group": "gateway.networking.k8s.io",
            "kind": "HTTPRoute",
            "name": route["metadata"]["name"],
        }
        assert _seconds(policy["spec"]["timeout"]["http"]["streamIdleTimeout"]) >= t.stream_idle_s
    if provider == "kgateway":  # Envoy's default stream idle timeout (5 min) would cut the prefill
        (policy,) = [c for c in routing if c["kind"] == "TrafficPolicy"]
        assert policy["spec"]["targetRefs"] == [
            {"group": "gateway.networking.k8s.io", "kind": "HTTPRoute", "name": route["metadata"]["name"]}
        ]
        assert _seconds(policy["spec"]["timeouts"]["streamIdle"]) >= t.stream_idle_s


def test_the_timeouts_follow_the_pools_length_and_cost_model() -> None:
    gateway = {"parentRef": {"name": "gw"}, "provider": "envoy-gateway"}
    base = pool_timeouts(parse_spec(spec(gateway=gateway)))
    short = pool_timeouts(
        parse_spec(spec(gateway=gateway, model={"name": PRESET.model.name, "maxModelLen": 32_768}))
    )
    slow = pool_timeouts(
        parse_spec(
            spec(gateway=gateway, router={"parameters": {"costModel": {"cLinS": 2e-4, "cAttS": 3e-8}}})
        )
    )
    assert short.stream_idle_s < base.stream_idle_s < slow.stream_idle_s
    assert short.longest_prefill_s == pytest.approx(PRESET.cost_model.cost(32_768, 32_768))
