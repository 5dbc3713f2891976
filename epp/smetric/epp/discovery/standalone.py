"""Standalone discovery: a fixed endpoint list from ``--endpoints``.

Accepted forms (roles are the llm-d labels ``prefill``, ``decode``, ``prefill-decode``; default
``prefill-decode``):

* ``--endpoints 10.0.0.1:8000,10.0.0.2:8000=prefill,10.0.0.3:8000=decode``
* ``--endpoints @endpoints.txt``: the same entries, one per line (or comma-separated); ``#`` starts
  a comment.
* ``--endpoints @endpoints.yaml`` (``.yaml``/``.yml``): a list whose items are either such strings or
  maps ``{address: ip:port, role: prefill, kv_events: tcp://ip:port, name: pod-a, node: node-1}``
  (``node``: the machine it runs on, for smetric-tiered's same-node migration; default unknown).

Each endpoint's KV-event publisher defaults to ``tcp://<ip>:<--kv-events-port>`` (0 disables).
Malformed entries raise :class:`EndpointSpecError` naming the entry.
"""

from __future__ import annotations

import ipaddress
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, ValidationError

from smetric.core.names import ROLE_BOTH, ROLE_DECODE, ROLE_PREFILL
from smetric.epp.contracts import EndpointInfo
from smetric.epp.discovery.base import OnEndpoints, kv_events_endpoint

ROLES = (ROLE_PREFILL, ROLE_DECODE, ROLE_BOTH)


class EndpointSpecError(ValueError):
    """A ``--endpoints`` entry or file is malformed."""


class _YamlEndpoint(BaseModel):
    model_config = ConfigDict(extra="forbid")
    address: str
    role: str = ROLE_BOTH
    kv_events: str | None = None
    name: str = ""
    node: str = ""


def parse_address(text: str) -> tuple[str, int]:
    """``ip:port`` or ``[v6]:port`` -> ``(ip, port)``; hostnames are rejected (Envoy routes to IPs)."""
    host, sep, port_s = text.strip().rpartition(":")
    if not sep or not host:
        raise EndpointSpecError(f"endpoint {text!r} is not ip:port")
    host = host[1:-1] if host.startswith("[") and host.endswith("]") else host
    try:
        ipaddress.ip_address(host)
        port = int(port_s)
    except ValueError as exc:
        raise EndpointSpecError(f"endpoint {text!r} is not ip:port ({exc})") from exc
    if not 0 < port < 65536:
        raise EndpointSpecError(f"endpoint {text!r}: port out of range")
    return host, port


def _endpoint(
    address: str, role: str, kv_port: int, kv: str | None = None, name: str = "", node: str = ""
) -> EndpointInfo:
    ip, port = parse_address(address)
    role = role.strip() or ROLE_BOTH
    if role not in ROLES:
        raise EndpointSpecError(f"endpoint {address!r}: role {role!r} is not one of {ROLES}")
    canonical = f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}"
    return EndpointInfo(
        address=canonical,
        role=role,
        pod_name=name,
        kv_events_endpoint=kv_events_endpoint(ip, kv_port) if kv is None else kv,
        node=node,
    )


def _from_entries(entries: Sequence[str], kv_port: int) -> list[EndpointInfo]:
    out: list[EndpointInfo] = []
    for entry in entries:
        address, _, role = entry.strip().partition("=")
        out.append(_endpoint(address, role, kv_port))
    return out


def _from_yaml(path: Path, kv_port: int) -> list[EndpointInfo]:
    try:
        data: Any = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise EndpointSpecError(f"{path}: not YAML: {exc}") from exc
    if isinstance(data, dict) and "endpoints" in data:
        data = data["endpoints"]
    if not isinstance(data, list):
        raise EndpointSpecError(f"{path}: expected a list of endpoints")
    out: list[EndpointInfo] = []
    for item in data:
        if isinstance(item, str):
            out.extend(_from_entries([item], kv_port))
            continue
        try:
            e = _YamlEndpoint.model_validate(item)
        except ValidationError as exc:
            raise EndpointSpecError(f"{path}: bad endpoint {item!r}: {exc}") from exc
        out.append(_endpoint(e.address, e.role, kv_port, e.kv_events, e.name, e.node))
    return out


def parse_endpoints(spec: str, kv_events_port: int = 5557) -> list[EndpointInfo]:
    """Parse ``--endpoints`` (see module doc). Duplicate addresses are an error."""
    spec = spec.strip()
    if spec.startswith("@"):
        path = Path(spec[1:])
        if not path.is_file():
            raise EndpointSpecError(f"endpoints file {path} does not exist")
        if path.suffix in (".yaml", ".yml"):
            endpoints = _from_yaml(path, kv_events_port)
        else:
            lines = (line.split("#", 1)[0] for line in path.read_text(encoding="utf-8").splitlines())
            entries = [e for line in lines for e in line.split(",") if e.strip()]
            endpoints = _from_entries(entries, kv_events_port)
    else:
        endpoints = _from_entries([e for e in spec.split(",") if e.strip()], kv_events_port)
    seen: set[str] = set()
    for e in endpoints:
        if e.address in seen:
            raise EndpointSpecError(f"endpoint {e.address} listed twice")
        seen.add(e.address)
    return endpoints


class StaticDiscovery:
    """A fixed endpoint set (standalone mode)."""

    def __init__(self, endpoints: Sequence[EndpointInfo]) -> None:
        self._endpoints = tuple(endpoints)

    @classmethod
    def from_spec(cls, spec: str, kv_events_port: int = 5557) -> StaticDiscovery:
        return cls(parse_endpoints(spec, kv_events_port))

    synced = True  # a fixed list is complete from the start (readiness)

    async def start(self, on_change: OnEndpoints) -> None:
        on_change(self._endpoints)

    async def stop(self) -> None:
        return None
