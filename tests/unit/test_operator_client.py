"""KubeClient URL table and credentials, plus a round trip against a small real aiohttp server."""

from __future__ import annotations

import json
from urllib.parse import unquote

import aiohttp.web
import kopf
import pytest

from smetric.operator.client import ApiError, Credentials, KubeClient, collection_path, object_path


def test_paths() -> None:
    assert object_path("v1", "ConfigMap", "ns", "c") == "/api/v1/namespaces/ns/configmaps/c"
    assert collection_path("apps/v1", "Deployment", "ns") == "/apis/apps/v1/namespaces/ns/deployments"
    assert (
        object_path("inference.networking.k8s.io/v1", "InferencePool", "ns", "p")
        == "/apis/inference.networking.k8s.io/v1/namespaces/ns/inferencepools/p"
    )
    with pytest.raises(KeyError, match="no URL known"):
        object_path("v1", "Secret", "ns", "s")


def test_credentials_from_kopf() -> None:
    plain = Credentials.from_kopf(kopf.ConnectionInfo(server="http://127.0.0.1:8001/", token="t"))
    assert plain.server == "http://127.0.0.1:8001" and plain.ssl_context is False
    assert plain.headers["Authorization"] == "Bearer t"
    tls = Credentials.from_kopf(kopf.ConnectionInfo(server="https://kubernetes.default.svc"))
    assert tls.ssl_context is not False


async def test_round_trip() -> None:
    seen: list[tuple[str, str, str, str]] = []

    async def handler(request: aiohttp.web.Request) -> aiohttp.web.Response:
        body = await request.text()
        seen.append((request.method, request.path_qs, request.headers.get("Content-Type", ""), body))
        if request.method == "GET" and request.path.endswith("/missing"):
            return aiohttp.web.json_response({"kind": "Status", "code": 404}, status=404)
        if request.method == "GET" and request.path.endswith("/configmaps"):
            return aiohttp.web.json_response({"items": [{"metadata": {"name": "c"}}]})
        if request.method == "PATCH" and "forbidden" in request.path:
            return aiohttp.web.json_response({"kind": "Status", "code": 403}, status=403)
        return aiohttp.web.json_response(json.loads(body) if body else {})

    app = aiohttp.web.Application()
    app.router.add_route("*", "/{tail:.*}", handler)
    runner = aiohttp.web.AppRunner(app)
    await runner.setup()
    site = aiohttp.web.TCPSite(runner, "127.0.0.1", 0)
    await site.start()
    port = runner.addresses[0][1]
    try:
        creds = Credentials(f"http://127.0.0.1:{port}", {"Authorization": "Bearer t"}, False)
        async with KubeClient(creds) as api:
            cm = {"apiVersion": "v1", "kind": "ConfigMap", "metadata": {"name": "c", "namespace": "ns"}}
            assert await api.apply(cm) == cm
            method, path, content_type, body = seen[-1]
            assert method == "PATCH" and content_type == "application/apply-patch+yaml"
            assert path == "/api/v1/namespaces/ns/configmaps/c?fieldManager=smetric-operator&force=true"
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
    finally:
        await runner.cleanup()
