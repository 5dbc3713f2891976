"""KubeClient (the official client's dynamic client, ``kubernetes_asyncio``) against a small real
aiohttp API server: discovery resolves plurals, server-side apply with the field manager, label
listing, status merge patch, 404 handling, unserved kinds; credentials from kopf's login."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any
from urllib.parse import unquote

import aiohttp.web
import kopf
import pytest

from smetric.operator.client import CHILD_KINDS, KINDS, ApiError, Credentials, KubeClient

VERBS = ["get", "list", "watch", "create", "patch", "update", "delete"]
DISCOVERY: dict[str, Any] = {
    "/version": {"major": "1", "minor": "33", "gitVersion": "v1.33.0"},
    "/api": {"kind": "APIVersions", "versions": ["v1"]},
    "/apis": {"kind": "APIGroupList", "apiVersion": "v1", "groups": []},
    "/api/v1": {
        "kind": "APIResourceList",
        "groupVersion": "v1",
        "resources": [
            {
                "name": "configmaps",
                "singularName": "configmap",
                "namespaced": True,
                "kind": "ConfigMap",
                "verbs": VERBS,
            },
            {
                "name": "configmaps/status",
                "singularName": "",
                "namespaced": True,
                "kind": "ConfigMap",
                "verbs": ["patch"],
            },
        ],
    },
}


def test_kinds_cover_every_rendered_kind_and_the_pool() -> None:
    from smetric.operator.render import render_resource

    raw = {
        "kind": "SMetricPool",
        "metadata": {"name": "p"},
        "spec": {
            "model": {"name": "m"},
            "topology": {"replicas": 2},
            "globalKV": {"enabled": True},
            "observability": {"podMonitor": True},
            "gateway": {"parentRef": {"name": "g"}, "provider": "gke"},
        },
    }
    rendered = {(c["apiVersion"], c["kind"]) for c in render_resource(raw)}
    raw["spec"]["gateway"]["provider"] = "istio"  # type: ignore[index]
    rendered |= {(c["apiVersion"], c["kind"]) for c in render_resource(raw)}
    assert rendered <= set(CHILD_KINDS) and KINDS[0] == ("smetric.io/v1alpha1", "SMetricPool")


def test_credentials_from_kopf() -> None:
    plain = Credentials.from_kopf(kopf.ConnectionInfo(server="http://127.0.0.1:8001/", token="t"))
    assert plain.server == "http://127.0.0.1:8001" and plain.token == "t"
    config = plain.configuration(5.0)
    assert config.api_key == {"BearerToken": "t"} and config.api_key_prefix == {"BearerToken": "Bearer"}
    tls = Credentials.from_kopf(
        kopf.ConnectionInfo(server="https://kubernetes.default.svc", ca_data=b"-----BEGIN CERTIFICATE-----\n")
    )
    assert tls.ca_path is not None and Path(tls.ca_path).read_bytes().startswith(b"-----BEGIN")
    assert tls.configuration(5.0).ssl_ca_cert == tls.ca_path and tls.configuration(5.0).verify_ssl


async def test_round_trip() -> None:
    seen: list[tuple[str, str, str, str]] = []
    discovery: list[str] = []

    async def handler(request: aiohttp.web.Request) -> aiohttp.web.Response:
        body = await request.text()
        path = request.path.rstrip("/") or "/"
        if request.method == "GET" and path in DISCOVERY:
            discovery.append(path)
            return aiohttp.web.json_response(DISCOVERY[path])
        seen.append((request.method, request.path_qs, request.headers.get("Content-Type", ""), body))
        if request.method in ("GET", "DELETE") and request.path.endswith("/missing"):
            return aiohttp.web.json_response({"kind": "Status", "code": 404}, status=404)
        if request.method == "GET" and request.path.endswith("/configmaps"):
            return aiohttp.web.json_response({"items": [{"metadata": {"name": "c"}}]})  # no `kind`: fine
        if request.method == "PATCH" and "forbidden" in request.path:
            return aiohttp.web.json_response({"kind": "Status", "code": 403, "message": "no"}, status=403)
        return aiohttp.web.json_response(json.loads(body) if body else {})

    app = aiohttp.web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        async with KubeClient(Credentials(f"http://127.0.0.1:{port}", token="t")) as api:
            cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}}
            assert await api.apply(cm) == cm
            method, path, content_type, body = seen[-1]
            assert method == "PATCH" and content_type == "application/apply-patch+yaml"
            assert path.startswith("/api/v1/namespaces/ns/configmaps/c?")  # plural from discovery
            assert "fieldManager=smetric-operator" in path and "force=" in path.lower()
            assert json.loads(body) == cm
            assert await api.get("v1", "ConfigMap", "ns", "missing") is None
            listed = await api.list("v1", "ConfigMap", "ns", "smetric.io/pool=p")
            assert listed == [{"metadata": {"name": "c"}, "apiVersion": "v1", "kind": "ConfigMap"}]
            assert unquote(seen[-1][1]) == "/api/v1/namespaces/ns/configmaps?labelSelector=smetric.io/pool=p"
            await api.patch_status("v1", "ConfigMap", "ns", "c", {"phase": "Ready"})
            assert seen[-1][2] == "application/merge-patch+json" and seen[-1][1].endswith("/c/status")
            await api.delete("v1", "ConfigMap", "ns", "missing")  # absent: not an error
            with pytest.raises(ApiError, match="HTTP 403"):
                await api.apply({**cm, "metadata": {"name": "forbidden", "namespace": "ns"}})
            # A kind the server does not serve (its CRD is not installed): empty list, refused apply,
            # answered from the /apis listing without re-running discovery.
            before = len(discovery)
            assert await api.list("apps/v1", "Deployment", "ns", "a=b") == []
            assert await api.list("networking.istio.io/v1", "DestinationRule", "ns", "a=b") == []
            assert len(discovery) == before
            with pytest.raises(ApiError, match="HTTP 404"):
                await api.apply(
                    {
                        "apiVersion": "apps/v1",
                        "kind": "Deployment",
                        "metadata": {"name": "d", "namespace": "ns"},
                    }
                )
    finally:
        await runner.cleanup()


async def test_unreachable_api_server_is_a_retryable_api_error() -> None:
    with pytest.raises(ApiError, match="API discovery"):
        async with KubeClient(Credentials("http://127.0.0.1:1", token="t"), timeout_s=2.0):
            pass


async def _serve(discovery: dict[str, Any], port: int) -> tuple[aiohttp.web.AppRunner, int]:
    async def handler(request: aiohttp.web.Request) -> aiohttp.web.Response:
        path = request.path.rstrip("/") or "/"
        if request.method == "GET" and path in discovery:
            return aiohttp.web.json_response(discovery[path])
        body = await request.text()
        return aiohttp.web.json_response(json.loads(body) if body else {})

    app = aiohttp.web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    await aiohttp.web.TCPSite(runner, "127.0.0.1", port, reuse_address=True).start()
    return runner, runner.addresses[0][1]


async def test_discovery_is_not_read_back_from_another_process_or_server() -> None:
    """The library's default discovery cache is one file per host in $TMPDIR, shared by every process:
    a server on a reused port (CI saw it) or an older API server handed this client a table without
    ``configmaps/status``, and ``patch_status`` failed with KeyError. Each client discovers afresh."""
    without_status = {
        **DISCOVERY,
        "/api/v1": {**DISCOVERY["/api/v1"], "resources": DISCOVERY["/api/v1"]["resources"][:1]},
    }
    first, port = await _serve(without_status, 0)
    try:
        async with KubeClient(Credentials(f"http://127.0.0.1:{port}", token="t")) as api:
            with pytest.raises(KeyError):
                await api.patch_status("v1", "ConfigMap", "ns", "c", {"phase": "Ready"})
    finally:
        await first.cleanup()
    second, _ = await _serve(DISCOVERY, port)  # the same host:port now serves configmaps/status
    try:
        async with KubeClient(Credentials(f"http://127.0.0.1:{port}", token="t")) as api:
            await api.patch_status("v1", "ConfigMap", "ns", "c", {"phase": "Ready"})
            cache_dir = api._cache_dir
            assert cache_dir is not None and Path(cache_dir).is_dir()
    finally:
        await second.cleanup()
    assert not Path(cache_dir).exists(), "each client removes its own cache"
