"""gateway.clientLimits: the slow-client bounds rendered per provider (Envoy Gateway
ClientTrafficPolicy, Istio EnvoyFilter; nothing for kgateway, GKE, none), schema-valid against the
pinned CRDs, with the standalone Envoy bootstrap's defaults."""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import jsonschema
import pytest

from smetric.epp.envoy.bootstrap import EnvoyOptions
from smetric.operator.cli import main
from smetric.operator.meta import SPEC_HASH_ANNOTATION
from smetric.operator.render_client_limits import CONNECTION_LIMIT, HCM
from smetric.operator.spec import InvalidSpecError, parse_spec
from smetric.operator.spec_gateway import ClientLimitsSpec
from tests.support.crd_schema import CelRuleError, source_of, validate_crd
from tests.support.operator_render import POOL, by_name, render, spec

LIMIT_KINDS = {"ClientTrafficPolicy", "EnvoyFilter"}


def _gateway(provider: str, **over: Any) -> dict[str, Any]:
    return spec(gateway={"parentRef": {"name": "gw"}, "provider": provider, **over})


def _limits(children: list[dict[str, Any]]) -> list[dict[str, Any]]:
    return [c for c in children if c["kind"] in LIMIT_KINDS]


def test_defaults_are_the_standalone_bootstraps() -> None:
    """The same bounds whichever gateway runs in front of the picker (docs/picker.md, slow clients)."""
    limits, envoy = ClientLimitsSpec(), EnvoyOptions(listen_port=1, admin_port=2, picker_port=3)
    assert limits.enabled
    assert limits.request_headers_timeout_s == envoy.request_headers_timeout_s == 10
    assert limits.request_timeout_s == envoy.request_timeout_s == 60
    assert limits.max_connections == envoy.max_connections
    assert limits.max_concurrent_streams == envoy.max_concurrent_streams == 100
    assert parse_spec(_gateway("envoy-gateway")).gateway.client_limits == limits  # type: ignore[union-attr]


def test_envoy_gateway_gets_a_client_traffic_policy() -> None:
    policy = by_name(render(_gateway("envoy-gateway")), "ClientTrafficPolicy", "p-client-limits")
    validate_crd(policy)
    assert source_of("ClientTrafficPolicy")["tag"] == "v1.9.0"
    assert policy["apiVersion"] == "gateway.envoyproxy.io/v1alpha1"
    assert policy["spec"] == {
        "targetRefs": [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}],
        "timeout": {"http": {"requestHeadersReceivedTimeout": "10s", "requestReceivedTimeout": "60s"}},
        "connection": {"connectionLimit": {"value": 10_000}},
        "http2": {"maxConcurrentStreams": 100},
    }
    # owned, labelled and hashed like every other child: pruned with the pool, drift re-applied
    meta = policy["metadata"]
    assert meta["namespace"] == "ns" and meta["ownerReferences"][0]["uid"] == POOL.uid
    assert meta["labels"]["smetric.io/pool"] == "p" and SPEC_HASH_ANNOTATION in meta["annotations"]


def test_istio_gets_an_envoy_filter_on_the_gateways_connection_manager() -> None:
    envoy_filter = by_name(render(_gateway("istio")), "EnvoyFilter", "p-client-limits")
    validate_crd(envoy_filter)
    assert envoy_filter["apiVersion"] == "networking.istio.io/v1alpha3"
    body = envoy_filter["spec"]
    assert body["targetRefs"] == [{"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}]
    timeouts, limit = body["configPatches"]
    match = {"context": "GATEWAY", "listener": {"filterChain": {"filter": {"name": HCM}}}}
    assert timeouts["applyTo"] == limit["applyTo"] == "NETWORK_FILTER"
    assert timeouts["match"] == limit["match"] == match
    assert timeouts["patch"]["operation"] == "MERGE"
    hcm = timeouts["patch"]["value"]["typed_config"]
    assert (hcm["request_headers_timeout"], hcm["request_timeout"]) == ("10s", "60s")
    assert hcm["http2_protocol_options"] == {"max_concurrent_streams": 100}
    assert set(hcm) == {"@type", "request_headers_timeout", "request_timeout", "http2_protocol_options"}
    assert limit["patch"]["operation"] == "INSERT_FIRST"
    assert limit["patch"]["value"]["name"] == CONNECTION_LIMIT
    assert limit["patch"]["value"]["typed_config"]["max_connections"] == 10_000
    # the DestinationRule is still there: the limits come in addition
    by_name(render(_gateway("istio")), "DestinationRule", "p-epp")


@pytest.mark.parametrize("provider", ["none", "kgateway", "gke"])
def test_providers_without_such_a_setting_get_nothing(provider: str) -> None:
    assert _limits(render(_gateway(provider))) == []


def test_no_gateway_no_limits() -> None:
    assert _limits(render(spec())) == []


@pytest.mark.parametrize("provider", ["envoy-gateway", "istio"])
def test_disabled_or_all_zero_renders_nothing(provider: str) -> None:
    assert _limits(render(_gateway(provider, clientLimits={"enabled": False}))) == []
    zero = {"requestHeadersTimeoutS": 0, "requestTimeoutS": 0, "maxConnections": 0, "maxConcurrentStreams": 0}
    assert _limits(render(_gateway(provider, clientLimits=zero))) == []


def test_a_bound_set_to_zero_is_left_out() -> None:
    """0 leaves that bound to the implementation (e.g. an Envoy Gateway before v1.9.0 has no
    requestHeadersReceivedTimeout: its API server refuses the field)."""
    raw = _gateway("envoy-gateway", clientLimits={"requestHeadersTimeoutS": 0, "maxConnections": 0})
    policy = by_name(render(raw), "ClientTrafficPolicy", "p-client-limits")
    validate_crd(policy)
    assert policy["spec"]["timeout"] == {"http": {"requestReceivedTimeout": "60s"}}
    assert "connection" not in policy["spec"]
    streams_only = {"requestHeadersTimeoutS": 0, "requestTimeoutS": 0, "maxConnections": 0}
    streams = by_name(
        render(_gateway("envoy-gateway", clientLimits=streams_only)), "ClientTrafficPolicy", "p-client-limits"
    )
    validate_crd(streams)
    assert set(streams["spec"]) == {"targetRefs", "http2"}
    only_limit = {
        "requestHeadersTimeoutS": 0,
        "requestTimeoutS": 0,
        "maxConcurrentStreams": 0,
        "maxConnections": 5,
    }
    istio = _gateway("istio", clientLimits=only_limit)
    (only,) = by_name(render(istio), "EnvoyFilter", "p-client-limits")["spec"]["configPatches"]
    assert only["patch"]["value"]["name"] == CONNECTION_LIMIT


def test_set_values_reach_the_objects() -> None:
    limits = {
        "requestHeadersTimeoutS": 5,
        "requestTimeoutS": 120,
        "maxConnections": 2048,
        "maxConcurrentStreams": 7,
    }
    policy = by_name(
        render(_gateway("envoy-gateway", clientLimits=limits)), "ClientTrafficPolicy", "p-client-limits"
    )
    assert policy["spec"]["timeout"]["http"] == {
        "requestHeadersReceivedTimeout": "5s",
        "requestReceivedTimeout": "120s",
    }
    assert policy["spec"]["connection"]["connectionLimit"]["value"] == 2048
    assert policy["spec"]["http2"] == {"maxConcurrentStreams": 7}
    patches = by_name(render(_gateway("istio", clientLimits=limits)), "EnvoyFilter", "p-client-limits")[
        "spec"
    ]
    hcm = patches["configPatches"][0]["patch"]["value"]["typed_config"]
    assert (hcm["request_headers_timeout"], hcm["request_timeout"]) == ("5s", "120s")
    assert hcm["http2_protocol_options"] == {"max_concurrent_streams": 7}
    assert patches["configPatches"][1]["patch"]["value"]["typed_config"]["max_connections"] == 2048


@pytest.mark.parametrize(
    "limits",
    [{"requestTimeoutS": -1}, {"requestHeadersTimeoutS": 100_000}, {"maxConnections": 1.5}, {"burst": 3}],
    ids=["negative", "over-the-duration-pattern", "fraction", "unknown-key"],
)
def test_out_of_range_limits_are_refused(limits: dict[str, Any]) -> None:
    with pytest.raises(InvalidSpecError, match="clientLimits"):
        parse_spec(_gateway("envoy-gateway", clientLimits=limits))


def test_the_pinned_crds_refuse_what_the_api_server_refuses() -> None:
    """The schemas are not a rubber stamp: a duration Envoy Gateway cannot parse, a policy without
    a target, a limit of 0 and a cross-namespace Istio target all fail."""
    policy = by_name(render(_gateway("envoy-gateway")), "ClientTrafficPolicy", "p-client-limits")
    bad_duration = copy.deepcopy(policy)
    bad_duration["spec"]["timeout"]["http"]["requestReceivedTimeout"] = "60.5s"
    with pytest.raises(jsonschema.ValidationError):
        validate_crd(bad_duration)
    zero = copy.deepcopy(policy)
    zero["spec"]["connection"]["connectionLimit"]["value"] = 0
    with pytest.raises(jsonschema.ValidationError):
        validate_crd(zero)
    untargeted = copy.deepcopy(policy)
    del untargeted["spec"]["targetRefs"]
    with pytest.raises(CelRuleError, match="either targetRef or targetRefs"):
        validate_crd(untargeted)
    envoy_filter = by_name(render(_gateway("istio")), "EnvoyFilter", "p-client-limits")
    elsewhere = copy.deepcopy(envoy_filter)
    elsewhere["spec"]["targetRefs"][0]["namespace"] = "other"
    with pytest.raises(CelRuleError, match="cross namespace"):
        validate_crd(elsewhere)


@pytest.mark.parametrize("provider", ["envoy-gateway", "istio"])
def test_a_gateway_in_another_namespace_gets_nothing_and_a_warning(
    provider: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """Both kinds attach to a Gateway of their own namespace only (local references)."""
    raw = _gateway(provider)
    raw["gateway"]["parentRef"]["namespace"] = "gateways"
    assert _limits(render(raw)) == []
    same = _gateway(provider)
    same["gateway"]["parentRef"]["namespace"] = "ns"
    assert len(_limits(render(same))) == 1
    doc = tmp_path / "pool.yaml"
    doc.write_text(
        "apiVersion: smetric.io/v1alpha1\nkind: SMetricPool\nmetadata: {name: p, namespace: ns}\n"
        f"spec:\n  model: {{name: emu, command: [smetric, emulate]}}\n  topology: {{replicas: 1}}\n"
        f"  gpus: {{countPerPod: 0, products: []}}\n"
        f"  gateway: {{parentRef: {{name: gw, namespace: gateways}}, provider: {provider}}}\n"
    )
    assert main(["render", str(doc)]) == 0
    err = capsys.readouterr().err
    assert "gateway.clientLimits not rendered: Gateway gateways/gw is in another namespace" in err
