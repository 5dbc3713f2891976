"""No provider gets a rendered retry or outlier detection (docs/operator.md, "Retries and outlier
detection per gateway"): on Envoy Gateway (through Envoy AI Gateway) and kgateway the InferencePool
cluster is ORIGINAL_DST on ``x-gateway-destination-endpoint``, where a retry re-sends the request to
the engine that just failed and an ejection is never consulted
(``tests/integration/envoy/test_envoy_gateway_shapes.py`` shows both on the real Envoy); Istio
already retries connect failures on the picker's fallbacks, and the field that would add more is
outside the pinned CRDs; GKE's policy has no such field. A retry added to a provider object fails
here, pointing at that table."""

from __future__ import annotations

from collections.abc import Iterator
from typing import Any

import pytest

from tests.support.operator_render import render, spec

PROVIDERS = ("none", "kgateway", "envoy-gateway", "istio", "gke")
# The fields each provider's API would take (Envoy Gateway BackendTrafficPolicy ``retry`` and
# ``healthCheck.passive``, Gateway API HTTPRoute ``retry``, Istio ``outlierDetection`` / ``retries``,
# an EnvoyFilter patching Envoy's ``retry_policy`` or ``outlier_detection``).
RETRY_FIELDS = {
    "retry",
    "retries",
    "retry_policy",
    "retryPolicy",
    "healthCheck",
    "outlierDetection",
    "outlier_detection",
}


def _keys(node: Any, path: str = "") -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            yield f"{path}.{key}"
            yield from _keys(value, f"{path}.{key}")
    elif isinstance(node, list):
        for i, value in enumerate(node):
            yield from _keys(value, f"{path}[{i}]")


@pytest.mark.parametrize("provider", PROVIDERS)
def test_no_provider_object_carries_a_retry_or_an_outlier_detection(provider: str) -> None:
    children = render(spec(gateway={"parentRef": {"name": "gw"}, "provider": provider}))
    found = [
        f"{c['kind']}/{c['metadata']['name']}{path}"
        for c in children
        for path in _keys(c.get("spec", {}))
        if path.rsplit(".", 1)[-1] in RETRY_FIELDS
    ]
    assert not found, f"{found}: see docs/operator.md, 'Retries and outlier detection per gateway'"


@pytest.mark.parametrize("provider", PROVIDERS)
def test_original_dst_gateways_get_the_primary_alone(provider: str) -> None:
    """Envoy AI Gateway (``envoy-gateway``) and kgateway route on ``x-gateway-destination-endpoint``
    with ORIGINAL_DST, which reads one ip:port: the picker runs with ``--destination-list=primary``
    there (the list would be a 503, tests/integration/envoy/test_envoy_gateway_shapes.py); override_host
    gateways (Istio) and the rest keep the fallbacks."""
    children = render(spec(gateway={"parentRef": {"name": "gw"}, "provider": provider}))
    (picker,) = [c for c in children if c["kind"] == "Deployment" and c["metadata"]["name"].endswith("-epp")]
    args = picker["spec"]["template"]["spec"]["containers"][0]["args"]
    expected = ["--destination-list=primary"] if provider in ("envoy-gateway", "kgateway") else []
    assert [a for a in args if a.startswith("--destination-list")] == expected
