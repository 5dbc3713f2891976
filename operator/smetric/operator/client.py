"""Minimal async Kubernetes client (aiohttp): GET, server-side apply and status merge-patch.

The operator touches a fixed set of kinds, so URLs come from a static table rather than API
discovery. Credentials come from kopf's login (``kopf.ConnectionInfo``): the same identity kopf
uses for its watches.
"""

from __future__ import annotations

import json
import ssl
from dataclasses import dataclass
from typing import Any
from urllib.parse import urlencode

import aiohttp

from smetric.operator.meta import FIELD_MANAGER, PLURAL, Manifest

# (apiVersion, kind) -> plural; every kind the renderer emits plus the pool itself.
PLURALS: dict[tuple[str, str], str] = {
    ("v1", "ConfigMap"): "configmaps",
    ("v1", "Service"): "services",
    ("v1", "ServiceAccount"): "serviceaccounts",
    ("apps/v1", "Deployment"): "deployments",
    ("rbac.authorization.k8s.io/v1", "Role"): "roles",
    ("rbac.authorization.k8s.io/v1", "RoleBinding"): "rolebindings",
    ("inference.networking.k8s.io/v1", "InferencePool"): "inferencepools",
    ("gateway.networking.k8s.io/v1", "HTTPRoute"): "httproutes",
    ("policy/v1", "PodDisruptionBudget"): "poddisruptionbudgets",
    ("networking.k8s.io/v1", "NetworkPolicy"): "networkpolicies",
    ("networking.istio.io/v1", "DestinationRule"): "destinationrules",
    ("networking.gke.io/v1", "HealthCheckPolicy"): "healthcheckpolicies",
    ("networking.gke.io/v1", "GCPBackendPolicy"): "gcpbackendpolicies",
    ("monitoring.coreos.com/v1", "PodMonitor"): "podmonitors",
    ("smetric.io/v1alpha1", "SMetricPool"): PLURAL,
}


class ApiError(RuntimeError):
    def __init__(self, status: int, method: str, url: str, body: str) -> None:
        super().__init__(f"{method} {url} -> HTTP {status}: {body[:500]}")
        self.status = status


def collection_path(api_version: str, kind: str, namespace: str) -> str:
    plural = PLURALS.get((api_version, kind))
    if plural is None:
        raise KeyError(f"no URL known for {api_version} {kind}")
    prefix = "/api/v1" if api_version == "v1" else f"/apis/{api_version}"
    return f"{prefix}/namespaces/{namespace}/{plural}"


def object_path(api_version: str, kind: str, namespace: str, name: str) -> str:
    return f"{collection_path(api_version, kind, namespace)}/{name}"


@dataclass(frozen=True, slots=True)
class Credentials:
    server: str
    headers: dict[str, str]
    ssl_context: ssl.SSLContext | bool

    @staticmethod
    def from_kopf(info: Any) -> Credentials:
        """From a ``kopf.ConnectionInfo`` (server, CA, token or client certificate)."""
        server = str(info.server).rstrip("/")
        headers = dict(info.as_http_headers())
        if not server.startswith("https"):
            return Credentials(server, headers, False)
        return Credentials(server, headers, info.as_ssl_context())


class KubeClient:
    """One aiohttp session; use as ``async with KubeClient(creds) as api``."""

    def __init__(self, credentials: Credentials, timeout_s: float = 30.0) -> None:
        self._creds = credentials
        self._timeout = aiohttp.ClientTimeout(total=timeout_s)
        self._session: aiohttp.ClientSession | None = None

    async def __aenter__(self) -> KubeClient:
        connector = aiohttp.TCPConnector(ssl=self._creds.ssl_context)
        self._session = aiohttp.ClientSession(
            headers=self._creds.headers, timeout=self._timeout, connector=connector
        )
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._session is not None:
            await self._session.close()
            self._session = None

    async def _request(
        self, method: str, path: str, body: bytes | None = None, content_type: str | None = None
    ) -> tuple[int, Any]:
        if self._session is None:
            raise RuntimeError("KubeClient used outside `async with`")
        url = self._creds.server + path
        headers = {"Content-Type": content_type} if content_type else {}
        async with self._session.request(method, url, data=body, headers=headers) as resp:
            text = await resp.text()
            if resp.status >= 400 and resp.status != 404:
                raise ApiError(resp.status, method, url, text)
            return resp.status, (json.loads(text) if text else None)

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Manifest | None:
        status, data = await self._request("GET", object_path(api_version, kind, namespace, name))
        return None if status == 404 else data

    async def list(self, api_version: str, kind: str, namespace: str, label_selector: str) -> list[Manifest]:
        """Objects of a kind in a namespace; an unserved kind (CRD not installed) lists as empty."""
        path = collection_path(api_version, kind, namespace)
        status, data = await self._request("GET", path + "?" + urlencode({"labelSelector": label_selector}))
        if status == 404 or not data:
            return []
        items: list[Manifest] = data.get("items") or []
        for item in items:  # list items omit apiVersion/kind
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """Delete (background propagation); an already absent object is not an error."""
        path = object_path(api_version, kind, namespace, name) + "?propagationPolicy=Background"
        await self._request("DELETE", path)

    async def apply(self, manifest: Manifest) -> Manifest:
        """Server-side apply (create or update), owning every field we render, forcing conflicts."""
        meta = manifest["metadata"]
        path = object_path(manifest["apiVersion"], manifest["kind"], meta["namespace"], meta["name"])
        body = json.dumps(manifest).encode()  # JSON is YAML: valid apply-patch+yaml
        status, data = await self._request(
            "PATCH",
            f"{path}?fieldManager={FIELD_MANAGER}&force=true",
            body,
            "application/apply-patch+yaml",
        )
        if status == 404:
            raise ApiError(404, "PATCH", path, json.dumps(data))
        result: Manifest = data
        return result

    async def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: dict[str, Any]
    ) -> None:
        path = object_path(api_version, kind, namespace, name) + "/status"
        body = json.dumps({"status": status}).encode()
        await self._request("PATCH", path, body, "application/merge-patch+json")
