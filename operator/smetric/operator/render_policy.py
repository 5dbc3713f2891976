"""Cluster hygiene around a pool: NetworkPolicies and (optional) Prometheus Operator PodMonitors
and ServiceMonitor."""

from __future__ import annotations

from typing import Any

from smetric.operator.meta import (
    EPP,
    MODEL_SERVER,
    MOONCAKE_MASTER,
    POOL_LABEL,
    Manifest,
    PoolRef,
    metadata,
    selector_labels,
)
from smetric.operator.render_engine import ENGINE_PORT
from smetric.operator.render_picker import GRPC_PORT, HEALTH_PORT, METRICS_PORT
from smetric.operator.spec import SMetricPoolSpec


def _ports(*numbers: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": n} for n in numbers]


def network_policies(pool: PoolRef, spec: SMetricPoolSpec) -> list[Manifest]:
    """Ingress only: the picker on its gRPC/health/metrics ports (the gateway runs elsewhere); engines
    on their serving port from anywhere (gateway, sidecars, scrapers) and on every port from the
    pool's own pods (picker scrape + KV events, NIXL/Mooncake transfers); the Mooncake master from
    the pool's pods and on its metrics port. Egress stays open (hub downloads, RDMA control)."""
    if not spec.policies.network_policy:
        return []
    same_pool = [{"podSelector": {"matchLabels": {POOL_LABEL: pool.name}}}]

    def policy(component: str, rules: list[dict[str, Any]]) -> Manifest:
        return {
            "apiVersion": "networking.k8s.io/v1",
            "kind": "NetworkPolicy",
            "metadata": metadata(pool, pool.child(component), component),
            "spec": {
                "podSelector": {"matchLabels": selector_labels(pool, component)},
                "policyTypes": ["Ingress"],
                "ingress": rules,
            },
        }

    out = [
        policy(EPP, [{"ports": _ports(GRPC_PORT, HEALTH_PORT, METRICS_PORT)}]),
        policy(MODEL_SERVER, [{"ports": _ports(ENGINE_PORT)}, {"from": same_pool}]),
    ]
    if spec.global_kv.enabled:
        out.append(
            policy(
                MOONCAKE_MASTER, [{"from": same_pool}, {"ports": _ports(spec.global_kv.master.metrics_port)}]
            )
        )
    return out


def pod_monitors(pool: PoolRef, spec: SMetricPoolSpec) -> list[Manifest]:
    """PodMonitors for the picker (metrics port) and the engines (/metrics on the serving port);
    with ``serviceMonitor`` the picker is scraped through its Service instead (one scrape, not two)."""
    obs = spec.observability
    out = [service_monitor(pool)] if obs.service_monitor else []
    if not obs.pod_monitor:
        return out

    def monitor(component: str, port: str) -> Manifest:
        return {
            "apiVersion": "monitoring.coreos.com/v1",
            "kind": "PodMonitor",
            "metadata": metadata(pool, pool.child(component), component),
            "spec": {
                "selector": {"matchLabels": selector_labels(pool, component)},
                "podMetricsEndpoints": [{"port": port, "path": "/metrics", "interval": "15s"}],
            },
        }

    if not obs.service_monitor:
        out.append(monitor(EPP, "metrics"))
    return [*out, monitor(MODEL_SERVER, "http")]


def service_monitor(pool: PoolRef) -> Manifest:
    """A ServiceMonitor for the picker's Service (``render_picker._service``, port ``http-metrics``)."""
    return {
        "apiVersion": "monitoring.coreos.com/v1",
        "kind": "ServiceMonitor",
        "metadata": metadata(pool, pool.child(EPP), EPP),
        "spec": {
            "selector": {"matchLabels": selector_labels(pool, EPP)},
            "namespaceSelector": {"matchNames": [pool.namespace]},
            "endpoints": [{"port": "http-metrics", "path": "/metrics", "interval": "15s"}],
        },
    }
