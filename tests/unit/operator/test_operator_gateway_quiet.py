"""No gateway object the operator renders can cut a request whose engine is quiet for a minute (a
100k-token prefill): every timeout in the routing objects of every provider is off or at least
``LONGEST_QUIET_S``, and nothing is rendered that bounds the picker connection's idle time. The
picker side (its gRPC server accepts the gateway's keepalive PINGs at any rate) is shown through
real Envoy by ``tests/integration/envoy/test_envoy_long_quiet*.py``."""

from __future__ import annotations

import re
from collections.abc import Iterator
from typing import Any

import pytest

from smetric.operator.render_gateway import BACKEND_TIMEOUT_S
from tests.support.operator_render import render, spec

PROVIDERS = ("none", "kgateway", "envoy-gateway", "istio", "gke")
ROUTING_KINDS = {"InferencePool", "HTTPRoute", "DestinationRule", "HealthCheckPolicy", "GCPBackendPolicy"}
LONGEST_QUIET_S = 600.0  # the gateway's own route timeout (EnvoyOptions.route_timeout_s)
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
def test_no_rendered_gateway_timeout_cuts_a_quiet_minute(provider: str, secure: bool) -> None:
    children = render(
        spec(gateway={"parentRef": {"name": "gw"}, "provider": provider}, router={"secureServing": secure})
    )
    routing = [c for c in children if c["kind"] in ROUTING_KINDS]
    assert {"InferencePool", "HTTPRoute"} <= {c["kind"] for c in routing}
    found = {
        f"{c['kind']}/{c['metadata']['name']}{path}": value
        for c in routing
        for path, value in _timeouts(c.get("spec", {}))
    }
    short = {k: v for k, v in found.items() if 0 < _seconds(v) < LONGEST_QUIET_S}
    assert not short, short
    route = next(c for c in routing if c["kind"] == "HTTPRoute")
    assert route["spec"]["rules"][0]["timeouts"] == {"request": "0s"}  # no request timeout at all
    if provider == "gke":
        assert BACKEND_TIMEOUT_S >= LONGEST_QUIET_S and any("timeoutSec" in k for k in found)
