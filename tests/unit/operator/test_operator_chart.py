"""The Helm chart rendered and linted by Helm's own engine (``helm-python-sdk``: Helm v4 as a library,
no helm binary), with default and non-default values; every object validated strictly for the
supported Kubernetes versions; upstream chart conventions (NOTES.txt, values.schema.json,
.helmignore, name/fullnameOverride, serviceAccount annotations, Grafana dashboard)."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

helm = pytest.importorskip("helm_python.chart", reason="helm-python-sdk ([test] extra) renders the chart")

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "smetric-operator"
K8S_VERSIONS = ("1.30.0", "1.31.0", "1.32.0", "1.33.0")
VALUES: dict[str, dict[str, Any]] = {
    "default": {},
    "namespaced": {
        "watchNamespaces": ["team-a", "team-b"],
        "nameOverride": "op",
        "serviceAccount": {"annotations": {"iam.gke.io/gcp-service-account": "op@p.iam.gserviceaccount.com"}},
        "logLevel": "debug",
        "imagePullSecrets": [{"name": "regcred"}],
    },
    "no-rbac-no-dashboard": {
        "rbac": {"create": False},
        "serviceAccount": {"create": False, "name": "existing"},
        "grafanaDashboard": {"enabled": False},
        "fullnameOverride": "smetric-op",
        "image": {"repository": "registry.example.com/smetric-operator", "tag": "0.1.0"},
    },
}


def _render(values: dict[str, Any]) -> tuple[list[dict[str, Any]], str]:
    chart = helm.Chart.load(CHART)
    out = chart.render(values, name="smetric", namespace="smetric-system", is_install=True)
    notes = out.pop("smetric-operator/templates/NOTES.txt", "")
    docs = [d for text in out.values() for d in yaml.safe_load_all(text) if d]
    return docs, notes


@pytest.mark.parametrize("name", sorted(VALUES))
def test_chart_renders_lints_and_validates(name: str) -> None:
    values = VALUES[name]
    report = helm.lint(CHART, values, strict=True)
    assert report["errors"] == [] and not [m for m in report["messages"] if m["severity"] >= 2], report
    docs, notes = _render(values)
    assert "docs/deploy.md" in notes  # NOTES.txt points to the first-request guide
    for version in K8S_VERSIONS:
        for doc in docs:
            kubernetes_validate.validate(doc, version, strict=True)
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    pod = deployment["spec"]["template"]["spec"]
    args = pod["containers"][0]["args"]
    if name == "namespaced":
        assert "--namespace=team-a" in args and "--verbose" in args
        assert {d["metadata"]["namespace"] for d in docs if d["kind"] == "Role"} == {"team-a", "team-b"}
        (sa,) = [d for d in docs if d["kind"] == "ServiceAccount"]
        assert sa["metadata"]["annotations"] == VALUES[name]["serviceAccount"]["annotations"]
        assert deployment["metadata"]["labels"]["app.kubernetes.io/name"] == "op"
        assert pod["imagePullSecrets"] == [{"name": "regcred"}]
    elif name == "no-rbac-no-dashboard":
        kinds = {d["kind"] for d in docs}
        assert not kinds & {"ClusterRole", "Role", "ServiceAccount", "ConfigMap"}
        assert deployment["metadata"]["name"] == "smetric-op" and pod["serviceAccountName"] == "existing"
        assert pod["containers"][0]["image"] == "registry.example.com/smetric-operator:0.1.0"
    else:
        assert "--all-namespaces" in args
        assert pod["containers"][0]["image"] == "ghcr.io/smetric/smetric-operator:0.1.0"  # pinned appVersion


def test_grafana_dashboard_is_loaded_by_the_sidecar_label() -> None:
    docs, _ = _render({})
    (cm,) = [d for d in docs if d["kind"] == "ConfigMap"]
    assert cm["metadata"]["labels"]["grafana_dashboard"] == "1"
    dashboard = json.loads(cm["data"]["smetric.json"])
    exprs = " ".join(t["expr"] for p in dashboard["panels"] for t in p["targets"])
    for metric in (
        "smetric_epp_decisions_total",  # decisions by reason
        "vllm:prefix_cache_hits_total",  # local hit ratio
        "smetric_epp_usage_tokens_total",  # all-tier (incl. global) hit ratio
        "smetric_epp_endpoint_queued_prefill_seconds",  # per-endpoint queued prefill
        "smetric_epp_ttft_seconds_bucket",  # TTFT vs SLO
        "smetric_epp_decision_latency_seconds_bucket",  # picker latency
    ):
        assert metric in exprs, metric


def test_chart_conventions_and_schema() -> None:
    chart = helm.Chart.load(CHART)
    assert chart.schema is not None and (CHART / ".helmignore").is_file()
    assert [c["name"] for c in chart.crds] == ["crds/smetricpools.smetric.io.yaml"]
    crd = yaml.safe_load((CHART / "crds" / "smetricpools.smetric.io.yaml").read_text())
    for version in K8S_VERSIONS:
        kubernetes_validate.validate(crd, version, strict=True)
    for bad in ({"logLevel": "loud"}, {"watchNamespaces": ["Team_A"]}, {"unknownKey": 1}):
        with pytest.raises(Exception, match="at '"):
            chart.validate_schema(bad)
