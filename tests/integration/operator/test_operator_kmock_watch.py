"""The operator's list/watch requests, as kmock receives them from the real operator process: every
child kind is listed and watched with ``labelSelector=app.kubernetes.io/managed-by=smetric-operator``
(the API server filters; kopf's handler ``labels=`` alone would stream every object of the kind and
drop the others client-side), the SMetricPools without one; with ``--namespace`` every namespaced
list/watch names that namespace and no other, and no request is cluster-wide."""

from __future__ import annotations

import asyncio
from pathlib import Path
from typing import Any

import aiohttp.web
import attrs
import kmock
import pytest

from smetric.operator.client import CHILD_KINDS
from smetric.operator.handlers import CHILD_SELECTOR
from tests.integration.operator.test_operator_kmock import (
    NS,
    VALID_SPEC,
    Cluster,
    children,
    cluster,
    eventually,
    pool_body,
    run_operator,
)

pytestmark = pytest.mark.integration
__all__ = ["cluster"]  # fixture used by name


@attrs.define(kw_only=True)
class RecordingCluster(Cluster):
    """The harness's cluster, recording kopf's lists and watches (a GET without an object name, from
    kopf's client; the reconciler's own per-pool lists carry the pool label and another agent)."""

    listings: list[tuple[str, str | None, dict[str, str]]] = attrs.field(factory=list)

    async def __call__(self, raw_request: aiohttp.web.BaseRequest) -> aiohttp.web.StreamResponse:
        """``/api/v1/namespaces``, which kopf lists and watches in namespace mode and kmock 0.8 cannot
        parse: one namespace, NS, and a watch stream that stays open without events."""
        if raw_request.path != "/api/v1/namespaces":
            return await super().__call__(raw_request)
        self.listings.append(("namespaces", None, dict(raw_request.query)))
        if raw_request.query.get("watch") != "true":
            items = [{"apiVersion": "v1", "kind": "Namespace", "metadata": {"name": NS}}]
            return aiohttp.web.json_response(
                {
                    "apiVersion": "v1",
                    "kind": "NamespaceList",
                    "metadata": {"resourceVersion": "1"},
                    "items": items,
                }
            )
        stream = aiohttp.web.StreamResponse(headers={"Content-Type": "application/json"})
        await stream.prepare(raw_request)
        await asyncio.sleep(float(raw_request.query.get("timeoutSeconds", "60")))  # the client's own bound
        return stream

    async def _handle(self, request: kmock.Request) -> aiohttp.web.StreamResponse:
        kopf_agent = request.headers.get("User-Agent", "").startswith("kopf/")
        plural = request.resource.plural if request.resource is not None else None
        if request.method == "GET" and plural and not request.name and kopf_agent:
            self.listings.append((plural, request.namespace, dict(request.params)))
        return await super()._handle(request)


@pytest.fixture
def kmock_options() -> dict[str, Any]:
    return {"cls": RecordingCluster}


CHILD_PLURALS = {
    "deployments",
    "services",
    "configmaps",
    "serviceaccounts",
    "roles",
    "rolebindings",
    "inferencepools",
    "httproutes",
    "poddisruptionbudgets",
    "networkpolicies",
}


def selectors(cluster: RecordingCluster) -> dict[str, set[str | None]]:
    """The label selectors each plural was listed or watched with (None: no selector)."""
    out: dict[str, set[str | None]] = {}
    for plural, _, params in cluster.listings:
        out.setdefault(plural, set()).add(params.get("labelSelector"))
    return out


async def reconcile_once(cluster: RecordingCluster) -> None:
    """A pool reconciled: the children exist, so every child kind's watch has started."""
    async with cluster.post(
        f"/apis/smetric.io/v1alpha1/namespaces/{NS}/smetricpools", json=pool_body(VALID_SPEC)
    ) as resp:
        assert resp.status == 200
    await eventually(lambda: children(cluster)["deployments"], "children applied")
    await eventually(
        lambda: {p for p, _, ps in cluster.listings if ps.get("watch")} >= CHILD_PLURALS, "child watches"
    )


@pytest.mark.parametrize(
    "scope", [["--all-namespaces"], ["--namespace", NS]], ids=["clusterwide", "namespaced"]
)
async def test_child_watches_select_server_side(
    cluster: RecordingCluster, tmp_path: Path, scope: list[str]
) -> None:
    with run_operator(cluster, tmp_path / "operator.log", scope):
        await reconcile_once(cluster)
    seen = selectors(cluster)
    # kmock serves 10 of the 19 child kinds; kopf skips the unserved ones (no CRD) with a warning.
    assert len(CHILD_KINDS) == 19 and set(seen) >= CHILD_PLURALS
    assert {plural: seen[plural] for plural in CHILD_PLURALS} == {
        plural: {CHILD_SELECTOR} for plural in CHILD_PLURALS
    }
    assert seen["smetricpools"] == {None}  # every pool is the operator's
    namespaced = [
        (p, ns) for p, ns, _ in cluster.listings if p not in ("namespaces", "customresourcedefinitions")
    ]
    if scope[0] == "--namespace":
        assert namespaced and {ns for _, ns in namespaced} == {NS}, namespaced
    else:
        assert {ns for _, ns in namespaced} == {None}, namespaced  # one cluster-wide stream per kind
