"""InferencePool v1 + pods -> Ready endpoints (pure; the watch lives in :mod:`.kubernetes`).

``inference.networking.k8s.io/v1`` InferencePool: ``spec.selector.matchLabels`` selects pods in the
pool's namespace; every Ready pod contributes ``podIP:targetPort`` for each ``spec.targetPorts[].number``.
The role comes from the pod label ``llm-d.ai/role`` (default ``prefill-decode``). A pod is Ready when
it has an IP, is not terminating, is ``Running`` and its ``Ready`` condition is ``True``.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field, ValidationError

from smetric.core.names import ROLE_BOTH, ROLE_LABEL
from smetric.epp.contracts import EndpointInfo
from smetric.epp.discovery.base import kv_events_endpoint

GROUP = "inference.networking.k8s.io"
VERSION = "v1"
PLURAL = "inferencepools"


class PoolSpecError(ValueError):
    """The InferencePool's spec is unusable (no selector, no ports)."""


class _Port(BaseModel):
    model_config = ConfigDict(extra="ignore")
    number: int = Field(ge=1, le=65535)


class _Selector(BaseModel):
    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    match_labels: dict[str, str] = Field(alias="matchLabels", min_length=1)


class PoolSpec(BaseModel):
    """The part of ``InferencePool.spec`` discovery needs (validated at the trust boundary)."""

    model_config = ConfigDict(extra="ignore", populate_by_name=True)
    selector: _Selector
    target_ports: list[_Port] = Field(alias="targetPorts", min_length=1, max_length=8)

    @property
    def match_labels(self) -> dict[str, str]:
        return self.selector.match_labels

    @property
    def ports(self) -> list[int]:
        return [p.number for p in self.target_ports]

    @classmethod
    def from_pool(cls, pool: Mapping[str, Any]) -> PoolSpec:
        try:
            return cls.model_validate(pool.get("spec") or {})
        except ValidationError as exc:
            name = (pool.get("metadata") or {}).get("name", "?")
            raise PoolSpecError(f"InferencePool {name}: unusable spec: {exc}") from exc


def label_selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{k}={v}" for k, v in sorted(labels.items()))


def pod_ready(pod: Mapping[str, Any]) -> bool:
    meta = pod.get("metadata") or {}
    status = pod.get("status") or {}
    if meta.get("deletionTimestamp") or not status.get("podIP") or status.get("phase") != "Running":
        return False
    return any(c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ())


def pool_endpoints(
    spec: PoolSpec, pods: Iterable[Mapping[str, Any]], kv_events_port: int
) -> tuple[EndpointInfo, ...]:
    """Ready selected pods × target ports, sorted by address (stable for change detection)."""
    selector = spec.match_labels.items()
    out: list[EndpointInfo] = []
    for pod in pods:
        meta = pod.get("metadata") or {}
        labels = meta.get("labels") or {}
        if not all(labels.get(k) == v for k, v in selector) or not pod_ready(pod):
            continue
        ip = pod["status"]["podIP"]
        host = f"[{ip}]" if ":" in ip else ip
        for port in spec.ports:
            out.append(
                EndpointInfo(
                    address=f"{host}:{port}",
                    role=labels.get(ROLE_LABEL, ROLE_BOTH),
                    pod_name=meta.get("name", ""),
                    kv_events_endpoint=kv_events_endpoint(ip, kv_events_port),
                    node=str((pod.get("spec") or {}).get("nodeName") or ""),
                )
            )
    return tuple(sorted(out, key=lambda e: e.address))
