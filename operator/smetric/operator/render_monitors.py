"""Prometheus Operator PodMonitors and the picker's ServiceMonitor (``observability``)."""

from __future__ import annotations

from smetric.operator.meta import EPP, MODEL_SERVER, Manifest, PoolRef, metadata, selector_labels
from smetric.operator.spec import SMetricPoolSpec


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
