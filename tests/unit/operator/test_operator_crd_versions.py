"""Every custom resource the operator renders (InferencePool, HTTPRoute, the provider objects, the
monitors) and the sample Gateway validate against the CRDs of the versions docs/deploy.md pins;
docs/deploy.md, the kind script and the schemas name the same versions."""

from __future__ import annotations

import copy
import re
from pathlib import Path
from typing import Any

import jsonschema
import pytest
import yaml

from smetric.operator.client import CHILD_KINDS
from tests.support.crd_schema import (
    SCHEMAS,
    CelRuleError,
    known_kinds,
    load_crd,
    source_of,
    validate_against,
    validate_crd,
)
from tests.support.operator_render import VARIANTS, by_name, render, spec, validate

ROOT = Path(__file__).resolve().parents[3]
PROVIDERS = ("none", "kgateway", "envoy-gateway", "istio", "gke")
# The repository each pinned component comes from, and the name docs/deploy.md gives it.
PINNED = {
    "kubernetes-sigs/gateway-api-inference-extension": "Inference Extension CRDs",
    "kubernetes-sigs/gateway-api": "Gateway API CRDs",
    "istio/api": "Istio",
    "envoyproxy/gateway": "Envoy Gateway",
    "prometheus-operator/prometheus-operator": "Prometheus Operator",
}


# API groups Kubernetes serves itself (kubernetes-validate knows them); every other group is a CRD.
BUILTIN_GROUPS = {"", "apps", "rbac.authorization.k8s.io", "policy", "networking.k8s.io"}


def _group(api_version: str) -> str:
    return api_version.rpartition("/")[0]


def _provider_variant(provider: str) -> dict[str, Any]:
    return spec(
        gateway={"parentRef": {"name": "gw"}, "provider": provider, "hostnames": ["llm.example.com"]},
        observability={"podMonitor": True, "serviceMonitor": provider == "gke"},
        router={"secureServing": provider != "envoy-gateway"},
    )


@pytest.mark.parametrize("provider", PROVIDERS)
def test_every_custom_resource_fits_the_pinned_crd(provider: str) -> None:
    children = render(_provider_variant(provider))
    custom = [c for c in children if _group(c["apiVersion"]) not in BUILTIN_GROUPS]
    assert {"InferencePool", "HTTPRoute", "PodMonitor"} <= {c["kind"] for c in custom}
    for child in custom:
        validate_crd(child)  # KeyError for a custom kind nobody pinned a CRD for
    for child in children:
        validate(child)


def test_every_variants_custom_resources_fit_the_pinned_crds() -> None:
    children = [c for v in VARIANTS.values() for c in render(v)]
    custom = [c for c in children if _group(c["apiVersion"]) not in BUILTIN_GROUPS]
    assert {"InferencePool", "HTTPRoute"} <= {c["kind"] for c in custom}
    for child in custom:
        validate_crd(child)


def test_every_custom_kind_the_operator_applies_has_a_pinned_schema() -> None:
    custom = {kind for api_version, kind in CHILD_KINDS if _group(api_version) not in BUILTIN_GROUPS}
    assert custom == known_kinds() - {"Gateway"}


def test_the_pinned_inference_pool_refuses_fields_of_later_versions() -> None:
    """GIE v1.0.0's InferencePool has no ``appProtocol`` (v1.4.0 adds it) and one target port: the
    API server refuses such an object on server-side apply, so the tests must too."""
    pool = by_name(render(spec()), "InferencePool", "p")
    validate_crd(pool)
    later = copy.deepcopy(pool)
    later["spec"]["appProtocol"] = "http"
    with pytest.raises(jsonschema.ValidationError, match="appProtocol"):
        validate_crd(later)
    two_ports = copy.deepcopy(pool)
    two_ports["spec"]["targetPorts"].append({"number": 8001})
    with pytest.raises(jsonschema.ValidationError):
        validate_crd(two_ports)
    assert "appProtocol" not in pool["spec"]
    assert source_of("InferencePool")["tag"] == "v1.0.0"


def test_the_pinned_crds_cel_rules_are_enforced() -> None:
    """The CRDs' x-kubernetes-validations run on the defaulted object, as the API server runs them:
    GKE's HealthCheckPolicy takes a fixed port only with USE_FIXED_PORT (GIE v1.0.0's own gke.yaml
    sets the port alone), and an InferencePool's Service picker reference needs a port."""
    check = by_name(render(_provider_variant("gke")), "HealthCheckPolicy", "p")
    validate_crd(check)
    assert check["spec"]["default"]["config"]["httpHealthCheck"]["portSpecification"] == "USE_FIXED_PORT"
    as_upstream = copy.deepcopy(check)
    del as_upstream["spec"]["default"]["config"]["httpHealthCheck"]["portSpecification"]
    with pytest.raises(CelRuleError, match="port and portName must be unset"):
        validate_crd(as_upstream)
    pool = by_name(render(spec()), "InferencePool", "p")
    del pool["spec"]["endpointPickerRef"]["port"]
    with pytest.raises(CelRuleError, match="port is required when kind is 'Service'"):
        validate_crd(pool)


def test_the_inference_pool_also_fits_the_latest_inference_extension() -> None:
    """docs/deploy.md: a v1.0.0-shaped pool is valid for later v1 CRDs (fields are only added)."""
    later = load_crd(SCHEMAS / "later" / "inferencepool-v1.6.0.json")
    assert later.source["tag"] == "v1.6.0"
    for variant in VARIANTS.values():
        validate_against(later, by_name(render(variant), "InferencePool", "p"))


def test_the_sample_gateway_fits_the_pinned_gateway_crd() -> None:
    (gateway,) = [d for d in yaml.safe_load_all((ROOT / "manifests/samples/gateway.yaml").read_text()) if d]
    validate_crd(gateway)


def test_deploy_guide_kind_script_and_schemas_name_the_same_versions() -> None:
    guide = (ROOT / "docs" / "deploy.md").read_text()
    script = (ROOT / "tests" / "e2e" / "kind_e2e.sh").read_text()
    tags: dict[str, set[str]] = {}
    for kind in known_kinds():
        source = source_of(kind)
        tags.setdefault(source["repository"], set()).add(source["tag"])
    for repository, name in PINNED.items():
        (tag,) = tags[repository]
        row = [line for line in guide.splitlines() if line.startswith(f"| {name}")]
        assert row and re.search(rf"\b{re.escape(tag)}\b", row[0]), (name, tag, row)
    gie = re.search(r"GIE_VERSION:-(v[\d.]+)", script)
    gateway_api = re.search(r"GATEWAY_API_VERSION:-(v[\d.]+)", script)
    assert gie and gateway_api
    assert {gie.group(1)} == tags["kubernetes-sigs/gateway-api-inference-extension"]
    assert {gateway_api.group(1)} == tags["kubernetes-sigs/gateway-api"]
    for url_part in (f"gateway-api/releases/download/{gateway_api.group(1)}/",):
        assert url_part in guide
    assert f"gateway-api-inference-extension/releases/download/{gie.group(1)}/" in guide


def test_the_chart_names_the_pinned_crd_versions() -> None:
    helm = pytest.importorskip("helm_python.chart", reason="helm-python-sdk ([test] extra) renders the chart")
    chart_dir = ROOT / "charts" / "smetric-operator"
    annotations = yaml.safe_load((chart_dir / "Chart.yaml").read_text())["annotations"]
    gie = source_of("InferencePool")["tag"]
    gateway_api = source_of("HTTPRoute")["tag"]
    assert annotations["smetric.io/inference-extension-version"] == gie
    assert annotations["smetric.io/gateway-api-version"] == gateway_api
    out = helm.Chart.load(chart_dir).render({}, name="smetric", namespace="smetric-system", is_install=True)
    notes = out["smetric-operator/templates/NOTES.txt"]
    assert f"Gateway API CRDs {gateway_api}" in notes and f"Inference Extension CRDs {gie}" in notes
