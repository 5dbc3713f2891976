"""Install manifests, Helm chart and Dockerfiles: valid, consistent with each other and with the code."""

from __future__ import annotations

import re
import shutil
import subprocess
import tomllib
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from smetric.operator.client import CHILD_KINDS
from smetric.operator.render import render_resource

ROOT = Path(__file__).resolve().parents[3]
CHART = ROOT / "charts" / "smetric-operator"
K8S_VERSION = "1.33.0"


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def _cluster_role() -> dict[str, Any]:
    (role,) = [d for d in _docs(ROOT / "manifests" / "rbac.yaml") if d["kind"] == "ClusterRole"]
    return role


def _allowed(rules: list[dict[str, Any]], group: str, resource: str) -> set[str]:
    verbs: set[str] = set()
    for rule in rules:
        if group in rule["apiGroups"] and resource in rule["resources"]:
            verbs |= set(rule["verbs"])
    return verbs


def test_chart_crd_is_identical_to_crds_dir() -> None:
    source = (ROOT / "crds" / "smetricpools.smetric.io.yaml").read_bytes()
    assert (CHART / "crds" / "smetricpools.smetric.io.yaml").read_bytes() == source


def test_chart_cluster_role_rules_match_manifests() -> None:
    text = (CHART / "templates" / "rbac.yaml").read_text()
    rules_block = text.split("rules:\n", 1)[1].split("\n---", 1)[0]
    assert yaml.safe_load(rules_block) == _cluster_role()["rules"]


@pytest.mark.parametrize("name", ["namespace.yaml", "rbac.yaml", "operator.yaml"])
def test_install_manifests_validate(name: str) -> None:
    for doc in _docs(ROOT / "manifests" / name):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_crd_validates_as_a_crd() -> None:
    for doc in _docs(ROOT / "crds" / "smetricpools.smetric.io.yaml"):
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_kustomizations_reference_existing_files() -> None:
    for kustomization in (ROOT / "manifests" / "kustomization.yaml", ROOT / "crds" / "kustomization.yaml"):
        for resource in yaml.safe_load(kustomization.read_text())["resources"]:
            assert (kustomization.parent / resource).exists(), resource


def test_kustomize_builds_the_install_bundle() -> None:
    kubectl = shutil.which("kubectl")
    if kubectl is None:
        pytest.skip("kubectl (with built-in kustomize) is not installed")
    out = subprocess.run(
        [kubectl, "kustomize", str(ROOT / "manifests")], capture_output=True, text=True, check=True
    ).stdout
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert sorted(d["kind"] for d in docs) == sorted(
        [
            "CustomResourceDefinition",
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
        ]
    )
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)


def test_operator_rbac_covers_what_the_code_does() -> None:
    rules = _cluster_role()["rules"]
    for api_version, kind in CHILD_KINDS:
        group = api_version.rpartition("/")[0]
        # RBAC names resources by plural (the operator itself discovers them): English plural of the kind.
        plural = kind.lower()[:-1] + "ies" if kind.endswith("y") else kind.lower() + "s"
        # get: before applying a child it does not list, the operator reads the object of that name
        # (reconcile: never force-applied over someone else's object)
        assert {"get", "list", "watch", "create", "patch", "delete"} <= _allowed(rules, group, plural), plural
    assert {"get", "list", "watch", "patch"} <= _allowed(rules, "smetric.io", "smetricpools")
    assert "patch" in _allowed(rules, "smetric.io", "smetricpools/status")
    assert "create" in _allowed(rules, "", "events")
    assert {"list", "watch"} <= _allowed(rules, "apiextensions.k8s.io", "customresourcedefinitions")


@pytest.mark.parametrize("router", [{}, {"leaderElection": True}])
def test_operator_holds_every_permission_it_grants_to_pickers(router: dict[str, object]) -> None:
    """RBAC forbids granting what one does not hold (no escalate/bind verbs are given)."""
    pool = {
        "kind": "SMetricPool",
        "metadata": {"name": "p"},
        "spec": {"model": {"name": "m"}, "topology": {"replicas": 1}, "router": router},
    }
    (role,) = [c for c in render_resource(pool) if c["kind"] == "Role"]
    operator_rules = _cluster_role()["rules"]
    for rule in role["rules"]:
        for group in rule["apiGroups"]:
            for resource in rule["resources"]:
                assert set(rule["verbs"]) <= _allowed(operator_rules, group, resource), resource
    all_verbs = {verb for rule in operator_rules for verb in rule["verbs"]}
    assert not all_verbs & {"escalate", "bind", "impersonate", "*"}


def test_dockerfiles_run_declared_console_scripts() -> None:
    scripts = tomllib.loads((ROOT / "pyproject.toml").read_text())["project"]["scripts"]
    for name in ("operator", "epp", "emulator"):
        text = (ROOT / "images" / f"{name}.Dockerfile").read_text()
        (entry,) = re.findall(r"^ENTRYPOINT (.+)$", text, flags=re.M)
        assert yaml.safe_load(entry)[0] in scripts
        for src in re.findall(r"^COPY (?!--from)(\S+)", text, flags=re.M):
            assert (ROOT / src).exists(), f"{name}.Dockerfile copies missing {src}"


def test_sample_images_match_dockerfile_tags() -> None:
    (pool,) = _docs(ROOT / "manifests" / "samples" / "kind-emulator.yaml")
    assert pool["spec"]["model"]["image"] == "smetric/smetric-emulator:dev"
    assert pool["spec"]["router"]["image"] == "smetric/smetric-epp:dev"
