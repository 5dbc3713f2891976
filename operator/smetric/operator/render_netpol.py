"""NetworkPolicies around a pool (``protection.networkPolicy``): ingress rules for the picker, the
engines and the Mooncake master. Not the routing policy (``router.policy``, ``smetric.policy``)."""

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
from smetric.operator.render_picker import GRPC_PORT, HEALTH_PORT, METRICS_PORT, SNAPSHOT_PORT
from smetric.operator.spec import SMetricPoolSpec


def _ports(*numbers: int) -> list[dict[str, Any]]:
    return [{"protocol": "TCP", "port": n} for n in numbers]


def network_policies(pool: PoolRef, spec: SMetricPoolSpec) -> list[Manifest]:
    """Ingress only: the picker on its gRPC/health/metrics ports (the gateway runs elsewhere) and,
    with 2+ replicas, on its snapshot port from its own replicas; engines
    on their serving port from anywhere (gateway, sidecars, scrapers) and on every port from the
    pool's own pods (picker scrape + KV events, NIXL/Mooncake transfers); the Mooncake master from
    the pool's pods and on its metrics port. Egress stays open (hub downloads, RDMA control)."""
    if not spec.protection.network_policy:
        return []
    same_pool = [{"podSelector": {"matchLabels": {POOL_LABEL: pool.name}}}]

    def netpol(component: str, rules: list[dict[str, Any]]) -> Manifest:
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

    epp_rules: list[dict[str, Any]] = [{"ports": _ports(GRPC_PORT, HEALTH_PORT, METRICS_PORT)}]
    if spec.picker_replicas >= 2:  # the replicas' snapshot port: from each other only
        replicas = [{"podSelector": {"matchLabels": selector_labels(pool, EPP)}}]
        epp_rules.append({"from": replicas, "ports": _ports(SNAPSHOT_PORT)})
    out = [
        netpol(EPP, epp_rules),
        netpol(MODEL_SERVER, [{"ports": _ports(ENGINE_PORT)}, {"from": same_pool}]),
    ]
    if spec.global_kv.enabled:
        out.append(
            netpol(
                MOONCAKE_MASTER, [{"from": same_pool}, {"ports": _ports(spec.global_kv.master.metrics_port)}]
            )
        )
    return out
