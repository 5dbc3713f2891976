"""The operator's Kubernetes access: the official client's dynamic client (``kubernetes_asyncio``, the
asyncio edition of ``kubernetes``), so nothing blocks kopf's event loop.

* Plurals and URLs come from API discovery (``DynamicClient.resources``), not a fixed table: any kind
  the renderer emits works once its API is served; an unserved kind (CRD not installed) lists as
  empty and refuses applies with :class:`ApiError` 404.
* Writes are server-side apply with ``fieldManager=smetric-operator`` and ``force=true``; status is
  a merge patch of the ``/status`` subresource.
* Discovery is cached per client, never in the library's shared default file
  (``$TMPDIR/osrcp-<md5(host)>.json``): that file outlives the process and is keyed by host only, so
  a previous process (or a test server on a reused port) could hand this one a stale resource table
  (a kind without its ``/status`` subresource, a plural from another server).
* Credentials come from kopf's login (``kopf.ConnectionInfo``): the same identity kopf uses for its
  watches. Inline CA / client-certificate data is written to private temporary files (the client
  takes paths).
"""

from __future__ import annotations

import contextlib
import hashlib
import os
import shutil
import tempfile
from dataclasses import dataclass, field
from typing import Any

import aiohttp
from kubernetes_asyncio import client as k8s
from kubernetes_asyncio.client.exceptions import ApiException
from kubernetes_asyncio.dynamic import DynamicClient
from kubernetes_asyncio.dynamic.exceptions import DynamicApiError, NotFoundError, ResourceNotFoundError

from smetric.operator.meta import API_VERSION, FIELD_MANAGER, KIND, Manifest

# Every kind the renderer emits (plus the pool itself, the first entry); kopf watches the children.
KINDS: tuple[tuple[str, str], ...] = (
    (API_VERSION, KIND),
    ("v1", "ConfigMap"),
    ("v1", "Service"),
    ("v1", "ServiceAccount"),
    ("apps/v1", "Deployment"),
    ("rbac.authorization.k8s.io/v1", "Role"),
    ("rbac.authorization.k8s.io/v1", "RoleBinding"),
    ("inference.networking.k8s.io/v1", "InferencePool"),
    ("gateway.networking.k8s.io/v1", "HTTPRoute"),
    ("policy/v1", "PodDisruptionBudget"),
    ("networking.k8s.io/v1", "NetworkPolicy"),
    ("networking.istio.io/v1", "DestinationRule"),
    ("networking.gke.io/v1", "HealthCheckPolicy"),
    ("networking.gke.io/v1", "GCPBackendPolicy"),
    ("networking.istio.io/v1alpha3", "EnvoyFilter"),
    ("gateway.envoyproxy.io/v1alpha1", "ClientTrafficPolicy"),
    ("gateway.envoyproxy.io/v1alpha1", "BackendTrafficPolicy"),
    ("gateway.kgateway.dev/v1alpha1", "TrafficPolicy"),
    ("monitoring.coreos.com/v1", "PodMonitor"),
    ("monitoring.coreos.com/v1", "ServiceMonitor"),
)
CHILD_KINDS: tuple[tuple[str, str], ...] = KINDS[1:]


class ApiError(RuntimeError):
    def __init__(self, status: int, method: str, what: str, body: str) -> None:
        super().__init__(f"{method} {what} -> HTTP {status}: {body[:500]}")
        self.status = status


def _pem_file(data: bytes | str | None, path: str | None, suffix: str) -> str | None:
    """A path for PEM material given inline (kopf's ``*_data``) or as a path. The file is named by
    the content's hash (private, written once): repeated logins do not accumulate files."""
    if path:
        return path
    if not data:
        return None
    raw = data.encode() if isinstance(data, str) else data
    name = os.path.join(
        tempfile.gettempdir(), f"smetric-operator-{hashlib.sha256(raw).hexdigest()[:16]}{suffix}"
    )
    if not os.path.exists(name):
        fd, tmp = tempfile.mkstemp(prefix="smetric-operator-", suffix=suffix)
        with os.fdopen(fd, "wb") as f:
            f.write(raw)
        os.replace(tmp, name)
    return name


@dataclass(frozen=True, slots=True)
class Credentials:
    server: str
    token: str | None = None
    ca_path: str | None = None
    insecure: bool = False
    cert_path: str | None = None
    key_path: str | None = None
    headers: dict[str, str] = field(default_factory=dict)  # e.g. basic auth

    @staticmethod
    def from_kopf(info: Any) -> Credentials:
        """From a ``kopf.ConnectionInfo`` (server, CA, token or client certificate)."""
        headers = {}
        if info.username and info.password:
            headers = {k: v for k, v in dict(info.as_http_headers()).items() if k.lower() == "authorization"}
        return Credentials(
            server=str(info.server).rstrip("/"),
            token=info.token,
            ca_path=_pem_file(info.ca_data, info.ca_path, ".ca.pem"),
            insecure=bool(info.insecure),
            cert_path=_pem_file(info.certificate_data, info.certificate_path, ".crt.pem"),
            key_path=_pem_file(info.private_key_data, info.private_key_path, ".key.pem"),
            headers=headers,
        )

    def configuration(self, timeout_s: float) -> k8s.Configuration:
        config = k8s.Configuration(host=self.server)
        if self.token:
            config.api_key = {"BearerToken": self.token}
            config.api_key_prefix = {"BearerToken": "Bearer"}
        if self.server.startswith("https"):
            config.ssl_ca_cert = self.ca_path
            config.verify_ssl = not self.insecure
            config.cert_file, config.key_file = self.cert_path, self.key_path
        return config


class KubeClient:
    """One API client + dynamic client; use as ``async with KubeClient(creds) as api``."""

    def __init__(self, credentials: Credentials, timeout_s: float = 30.0) -> None:
        self._creds = credentials
        self._timeout_s = timeout_s
        self._api: k8s.ApiClient | None = None
        self._dynamic: DynamicClient | None = None
        self._served: set[str] = set()  # groupVersions the server serves (one /apis request)
        self._cache_dir: str | None = None  # this client's own discovery cache (removed on exit)

    async def __aenter__(self) -> KubeClient:
        self._api = k8s.ApiClient(self._creds.configuration(self._timeout_s))
        for name, value in self._creds.headers.items():
            self._api.set_default_header(name, value)
        try:
            self._cache_dir = tempfile.mkdtemp(prefix="smetric-discovery-")
            cache_file = os.path.join(self._cache_dir, "d.json")
        except OSError:  # no writable temp dir: a path that never exists, so discovery is never read back
            cache_file = os.path.join(
                tempfile.gettempdir(), f"smetric-discovery-{os.urandom(8).hex()}", "d.json"
            )
        try:
            self._dynamic = await DynamicClient(self._api, cache_file=cache_file)
            self._served = await self._served_group_versions()
        except ApiException as exc:
            await self.__aexit__()
            raise ApiError(exc.status or 0, "GET", "API discovery", str(exc.body or exc.reason)) from None
        except Exception as exc:  # connection refused, TLS: surfaced as a retryable API error
            await self.__aexit__()
            raise ApiError(0, "GET", "API discovery", str(exc)) from None
        return self

    async def __aexit__(self, *_: object) -> None:
        if self._api is not None:
            await self._api.close()
        self._api = self._dynamic = None
        if self._cache_dir is not None:
            shutil.rmtree(self._cache_dir, ignore_errors=True)
            self._cache_dir = None

    async def _served_group_versions(self) -> set[str]:
        assert self._api is not None
        data = await self._api.call_api(
            "/apis",
            "GET",
            header_params={"Accept": "application/json"},
            response_types_map={200: "object"},
            auth_settings=["BearerToken"],
            _return_http_data_only=True,
            _request_timeout=self._timeout_s,
        )
        served = {"v1"}
        for group in (data or {}).get("groups") or []:
            served |= {v.get("groupVersion") for v in group.get("versions") or [] if v.get("groupVersion")}
        return served

    async def _resource(self, api_version: str, kind: str) -> Any | None:
        """The discovered resource (plural, namespaced, subresources), None when not served.

        A group/version the server does not serve (CRD not installed: Istio, GKE, Prometheus
        Operator kinds) is answered from the ``/apis`` listing made once per client, so it never
        triggers the dynamic client's full re-discovery."""
        if self._dynamic is None:
            raise RuntimeError("KubeClient used outside `async with`")
        if api_version not in self._served:
            return None
        try:
            return await self._dynamic.resources.get(api_version=api_version, kind=kind)
        except ResourceNotFoundError:
            return None

    async def _call(self, method: str, what: str, coro: Any) -> Any:
        """Await a dynamic-client call made with ``serialize=False, _request_timeout=self._timeout_s`` (the client then hands back the
        raw response, errors included): the JSON body as plain data (lists without a top-level
        ``kind`` are fine), None for 404, :class:`ApiError` for any other error status."""
        try:
            response = await coro
        except NotFoundError:
            return None
        except DynamicApiError as exc:
            raise ApiError(exc.status or 0, method, what, exc.summary()) from None
        except (aiohttp.ClientError, TimeoutError) as exc:  # connection lost, request timed out
            raise ApiError(0, method, what, f"{type(exc).__name__}: {exc}") from None
        try:
            if response.status == 404:
                return None
            if response.status >= 400:
                raise ApiError(response.status, method, what, await response.text())
            return await response.json(content_type=None)
        finally:
            response.release()

    async def get(self, api_version: str, kind: str, namespace: str, name: str) -> Manifest | None:
        resource = await self._resource(api_version, kind)
        if resource is None:
            return None
        assert self._dynamic is not None
        what = f"{kind} {namespace}/{name}"
        result: Manifest | None = await self._call(
            "GET",
            what,
            self._dynamic.get(
                resource, name=name, namespace=namespace, serialize=False, _request_timeout=self._timeout_s
            ),
        )
        if not isinstance(result, dict) or result.get("kind") == "Status":
            return None  # e.g. a Status body for a deleted object
        if not (result.get("metadata") or {}).get("name"):
            return None
        return result

    async def list(self, api_version: str, kind: str, namespace: str, label_selector: str) -> list[Manifest]:
        """Objects of a kind in a namespace; an unserved kind (CRD not installed) lists as empty."""
        resource = await self._resource(api_version, kind)
        if resource is None:
            return []
        assert self._dynamic is not None
        data = await self._call(
            "GET",
            f"{kind} in {namespace}",
            self._dynamic.get(
                resource,
                namespace=namespace,
                label_selector=label_selector,
                serialize=False,
                _request_timeout=self._timeout_s,
            ),
        )
        items: list[Manifest] = (data or {}).get("items") or []
        for item in items:  # list items omit apiVersion/kind
            item.setdefault("apiVersion", api_version)
            item.setdefault("kind", kind)
        return items

    async def delete(self, api_version: str, kind: str, namespace: str, name: str) -> None:
        """Delete (background propagation); an already absent object is not an error."""
        resource = await self._resource(api_version, kind)
        if resource is None:
            return
        assert self._dynamic is not None
        with contextlib.suppress(NotFoundError):
            await self._call(
                "DELETE",
                f"{kind} {namespace}/{name}",
                self._dynamic.delete(
                    resource,
                    name=name,
                    namespace=namespace,
                    propagation_policy="Background",
                    serialize=False,
                    _request_timeout=self._timeout_s,
                ),
            )

    async def apply(self, manifest: Manifest) -> Manifest:
        """Server-side apply (create or update), owning every field we render, forcing conflicts."""
        meta = manifest["metadata"]
        what = f"{manifest['kind']} {meta['namespace']}/{meta['name']}"
        resource = await self._resource(manifest["apiVersion"], manifest["kind"])
        if resource is None:
            raise ApiError(404, "PATCH", what, f"{manifest['apiVersion']} {manifest['kind']} is not served")
        assert self._dynamic is not None
        result: Manifest | None = await self._call(
            "PATCH",
            what,
            self._dynamic.server_side_apply(
                resource,
                body=manifest,
                name=meta["name"],
                namespace=meta["namespace"],
                field_manager=FIELD_MANAGER,
                force_conflicts=True,  # ?force=True (the API server parses Go booleans)
                serialize=False,
                _request_timeout=self._timeout_s,
            ),
        )
        if result is None:
            raise ApiError(404, "PATCH", what, "not found")
        return result

    async def patch_status(
        self, api_version: str, kind: str, namespace: str, name: str, status: dict[str, Any]
    ) -> None:
        resource = await self._resource(api_version, kind)
        if resource is None:
            raise ApiError(404, "PATCH", f"{kind} {namespace}/{name}/status", "kind not served")
        assert self._dynamic is not None
        await self._call(
            "PATCH",
            f"{kind} {namespace}/{name}/status",
            self._dynamic.patch(
                resource.subresources["status"],
                body={"status": status},
                name=name,
                namespace=namespace,
                content_type="application/merge-patch+json",
                serialize=False,
                _request_timeout=self._timeout_s,
            ),
        )
