"""With watchNamespaces set, the chart grants the operator's namespaced rules per
namespace (Role + RoleBinding) and keeps only cluster-scoped reads in its ClusterRole. No helm here:
the template's rule blocks are read as YAML (the test for the all-namespaces case is in
test_operator_manifests.py)."""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

RBAC = Path(__file__).resolve().parents[3] / "charts" / "smetric-operator" / "templates" / "rbac.yaml"
CLUSTER_SCOPED = {"customresourcedefinitions", "namespaces"}


def _rules_after(text: str, marker: str) -> list[dict[str, Any]]:
    block = text.split(marker, 1)[1].split("rules:\n", 1)[1].split("\n---", 1)[0]
    rules: list[dict[str, Any]] = yaml.safe_load(block)
    return rules


def test_namespaced_mode_splits_the_rules_without_losing_or_widening_any() -> None:
    text = RBAC.read_text()
    full = _rules_after(text, "{{- if not .Values.watchNamespaces }}")
    narrowed = text.split("{{- else }}", 1)[1]
    cluster = _rules_after(narrowed, "kind: ClusterRole\n")
    role = _rules_after(narrowed, "kind: Role\n")
    assert all(set(r["resources"]) <= CLUSTER_SCOPED for r in cluster)
    assert all(not set(r["resources"]) & CLUSTER_SCOPED for r in role)
    assert sorted(map(str, cluster + role)) == sorted(map(str, full))
    for create in ("deployments", "roles", "rolebindings", "services"):
        assert not any(create in r["resources"] for r in cluster)  # never cluster-wide writes
    assert "{{- range $ns := .Values.watchNamespaces }}" in narrowed and "namespace: {{ $ns }}" in narrowed
