"""Writes the CRD schemas the renderer tests validate against, from upstream repositories at the
versions docs/deploy.md pins: ``python tests/support/crd_schemas/extract.py <mirrors> [output ...]``
where ``<mirrors>/<owner>+<name>/repo`` is a git clone of each source below (or of the fork
:data:`MIRRORS` names for it); naming outputs (e.g. ``trafficpolicy.json``) writes only those.

Each output file keeps one served version's ``openAPIV3Schema`` without descriptions and without
``status`` (the renderer never writes status), plus where it came from (repository, tag, commit, path).
``KEEP`` narrows a large schema to the fields the renderer writes: a field left out is then refused
by the tests (stricter than the CRD, never looser).
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path
from typing import Any

import yaml

HERE = Path(__file__).resolve().parent

# (output file, repository, tag, CRD file, kind, version)
SOURCES: tuple[tuple[str, str, str, str, str, str], ...] = (
    (
        "inferencepool.json",
        "kubernetes-sigs/gateway-api-inference-extension",
        "v1.0.0",
        "config/crd/bases/inference.networking.k8s.io_inferencepools.yaml",
        "InferencePool",
        "v1",
    ),
    (
        "httproute.json",
        "kubernetes-sigs/gateway-api",
        "v1.3.0",
        "config/crd/standard/gateway.networking.k8s.io_httproutes.yaml",
        "HTTPRoute",
        "v1",
    ),
    (
        "gateway.json",
        "kubernetes-sigs/gateway-api",
        "v1.3.0",
        "config/crd/standard/gateway.networking.k8s.io_gateways.yaml",
        "Gateway",
        "v1",
    ),
    (
        "destinationrule.json",
        "istio/api",
        "1.28.0",
        "kubernetes/customresourcedefinitions.gen.yaml",
        "DestinationRule",
        "v1",
    ),
    (
        "healthcheckpolicy.json",
        "GoogleCloudPlatform/gke-gateway-api",
        "fc40d606a5332f11a8883f85caff66b63c4e88ef",
        "config/crd/networking.gke.io_healthcheckpolicies.yaml",
        "HealthCheckPolicy",
        "v1",
    ),
    (
        "gcpbackendpolicy.json",
        "GoogleCloudPlatform/gke-gateway-api",
        "fc40d606a5332f11a8883f85caff66b63c4e88ef",
        "config/crd/networking.gke.io_gcpbackendpolicies.yaml",
        "GCPBackendPolicy",
        "v1",
    ),
    (
        "envoyfilter.json",
        "istio/api",
        "1.28.0",
        "kubernetes/customresourcedefinitions.gen.yaml",
        "EnvoyFilter",
        "v1alpha3",
    ),
    (
        "clienttrafficpolicy.json",
        "envoyproxy/gateway",
        "v1.9.0",
        "charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_clienttrafficpolicies.yaml",
        "ClientTrafficPolicy",
        "v1alpha1",
    ),
    (
        "backendtrafficpolicy.json",
        "envoyproxy/gateway",
        "v1.9.0",
        "charts/gateway-helm/charts/crds/crds/generated/gateway.envoyproxy.io_backendtrafficpolicies.yaml",
        "BackendTrafficPolicy",
        "v1alpha1",
    ),
    (
        # kgateway v2.1.0: no mirror holds the tag; main right after the v2.1 release cut (the
        # commit renaming the rolling main build to v2.2.0-main). TrafficPolicy ``timeouts`` is
        # unchanged from its introduction (77e516ea16, Aug 2025) to the v2.2.x branch.
        "trafficpolicy.json",
        "kgateway-dev/kgateway",
        "8b11de40dc328bf7f05a6c67f9e23ec3b6c686e8",
        "install/helm/kgateway-crds/templates/gateway.kgateway.dev_trafficpolicies.yaml",
        "TrafficPolicy",
        "v1alpha1",
    ),
    (
        "podmonitor.json",
        "prometheus-operator/prometheus-operator",
        "v0.87.0",
        "example/prometheus-operator-crd/monitoring.coreos.com_podmonitors.yaml",
        "PodMonitor",
        "v1",
    ),
    (
        "servicemonitor.json",
        "prometheus-operator/prometheus-operator",
        "v0.87.0",
        "example/prometheus-operator-crd/monitoring.coreos.com_servicemonitors.yaml",
        "ServiceMonitor",
        "v1",
    ),
)


# Later versions the renders are also checked against (forward compatibility), under later/.
LATER: tuple[tuple[str, str, str, str, str, str], ...] = (
    (
        "later/inferencepool-v1.6.0.json",
        "kubernetes-sigs/gateway-api-inference-extension",
        "v1.6.0",
        "config/crd/bases/inference.networking.k8s.io_inferencepools.yaml",
        "InferencePool",
        "v1",
    ),
    (
        "later/trafficpolicy-v2.2.x.json",
        "kgateway-dev/kgateway",
        "beef25ebcc44edf229bfbac98927212e41e61e80",  # the v2.2.x branch, May 2026
        "install/helm/kgateway-crds/templates/gateway.kgateway.dev_trafficpolicies.yaml",
        "TrafficPolicy",
        "v1alpha1",
    ),
)

# Repositories read from a fork carrying their history, where the stored upstream snapshot is older
# than the pinned commit (kgateway-dev/kgateway's stops in February 2025).
MIRRORS: dict[str, str] = {"kgateway-dev/kgateway": "sheidkamp/kgateway"}

# Output file -> {dotted object path: the properties kept there}.
KEEP: dict[str, dict[str, tuple[str, ...]]] = {
    "destinationrule.json": {"spec": ("host", "trafficPolicy"), "spec.trafficPolicy": ("tls",)},
    "backendtrafficpolicy.json": {"spec": ("targetRef", "targetRefs", "targetSelectors", "timeout")},
    "clienttrafficpolicy.json": {
        "spec": ("targetRef", "targetRefs", "targetSelectors", "timeout", "connection", "http2")
    },
    "trafficpolicy.json": {"spec": ("targetRefs", "targetSelectors", "timeouts")},
    "later/trafficpolicy-v2.2.x.json": {"spec": ("targetRefs", "targetSelectors", "timeouts")},
}


def _keep(schema: dict[str, Any], keep: dict[str, tuple[str, ...]]) -> None:
    for dotted, names in keep.items():
        node = schema
        for part in dotted.split("."):
            node = node["properties"][part]
        node["properties"] = {k: v for k, v in node["properties"].items() if k in names}


def _strip(node: Any) -> Any:
    if isinstance(node, dict):
        return {k: _strip(v) for k, v in node.items() if k != "description"}
    if isinstance(node, list):
        return [_strip(v) for v in node]
    return node


def extract(mirrors: Path, repo: str, tag: str, path: str, kind: str, version: str) -> dict[str, Any]:
    clone = mirrors / MIRRORS.get(repo, repo).replace("/", "+") / "repo"
    git = ["git", "-C", str(clone)]
    commit = subprocess.run(
        [*git, "rev-parse", f"{tag}^{{commit}}"], capture_output=True, text=True, check=True
    )
    text = subprocess.run([*git, "show", f"{tag}:{path}"], capture_output=True, text=True, check=True).stdout
    for crd in yaml.safe_load_all(text):
        if crd and crd["spec"]["names"]["kind"] == kind:
            (served,) = [v for v in crd["spec"]["versions"] if v["name"] == version and v.get("served")]
            schema = _strip(served["schema"]["openAPIV3Schema"])
            schema["properties"].pop("status", None)
            return {
                "source": {"repository": repo, "tag": tag, "commit": commit.stdout.strip(), "path": path},
                "apiVersion": f"{crd['spec']['group']}/{version}",
                "kind": kind,
                "openAPIV3Schema": schema,
            }
    raise SystemExit(f"{repo}@{tag}:{path}: no CRD of kind {kind}")


def main(argv: list[str]) -> int:
    mirrors, only = Path(argv[0]), set(argv[1:])
    for out, *source in (*SOURCES, *LATER):
        if only and out not in only:
            continue
        data = extract(mirrors, *source)
        _keep(data["openAPIV3Schema"], KEEP.get(out, {}))
        data["kept"] = KEEP.get(out, {})
        (HERE / out).parent.mkdir(exist_ok=True)
        (HERE / out).write_text(json.dumps(data, indent=1, sort_keys=True) + "\n")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
