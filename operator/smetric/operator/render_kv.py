"""The cluster-wide global KV tier: Mooncake master (Deployment + Service) and each engine's LMCache file."""

from __future__ import annotations

from typing import Any

from smetric.operator.meta import MOONCAKE_MASTER, Manifest, PoolRef, metadata, selector_labels
from smetric.operator.spec import SMetricPoolSpec, quantity_bytes

LMCACHE_CONFIG_DIR = "/etc/lmcache"
LMCACHE_CONFIG_FILE = f"{LMCACHE_CONFIG_DIR}/lmcache.yaml"


def _yaml_str(value: str) -> str:
    # Values are validated identifiers/hosts; quoting keeps YAML from reinterpreting them.
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'


def lmcache_config_text(pool: PoolRef, spec: SMetricPoolSpec, pod_ip: str = "${POD_IP}") -> str:
    """LMCache-on-Mooncake YAML. ``pod_ip`` stays a shell variable, filled in when the container starts."""
    kv = spec.global_kv
    host = pool.mooncake_host()
    master = kv.master
    lines = [
        f"chunk_size: {kv.lmcache.chunk_size}",
        "local_cpu: false",
        f"max_local_cpu_size: {kv.lmcache.max_local_cpu_size_gb}",
        f"remote_url: {_yaml_str(f'mooncakestore://{host}:{master.rpc_port}/')}",
        "remote_serde: naive",
        "extra_config:",
        f"  local_hostname: {_yaml_str(pod_ip)}",
        f"  metadata_server: {_yaml_str(f'http://{host}:{master.metadata_port}/metadata')}",
        f"  master_server_address: {_yaml_str(f'{host}:{master.rpc_port}')}",
        f"  protocol: {kv.protocol}",
        f"  device_name: {_yaml_str(','.join(kv.device_names))}",
        f"  global_segment_size: {quantity_bytes(kv.segment_size)}",
        f"  local_buffer_size: {quantity_bytes(kv.local_buffer_size)}",
    ]
    return "\n".join(lines) + "\n"


def lmcache_launcher(pool: PoolRef, spec: SMetricPoolSpec) -> list[str]:
    """``sh -c`` command that writes the LMCache file with this pod's IP, then execs the engine argv."""
    script = "\n".join(
        [
            "set -eu",
            f"mkdir -p {LMCACHE_CONFIG_DIR}",
            f"cat > {LMCACHE_CONFIG_FILE} <<EOF",
            lmcache_config_text(pool, spec).rstrip("\n"),
            "EOF",
            'exec "$@"',
        ]
    )
    return ["/bin/sh", "-c", script, "engine"]


def mooncake_master(pool: PoolRef, spec: SMetricPoolSpec) -> list[Manifest]:
    kv = spec.global_kv
    master = kv.master
    name = pool.mooncake_name
    meta = metadata(pool, name, MOONCAKE_MASTER)
    ports = [
        ("rpc", master.rpc_port),
        ("http-metadata", master.metadata_port),
        ("metrics", master.metrics_port),
    ]
    container: dict[str, Any] = {
        "name": "mooncake-master",
        "image": kv.mooncake_image,
        "command": ["mooncake_master"],
        "args": [
            f"--rpc_port={master.rpc_port}",
            "--rpc_address=$(POD_IP)",
            "--enable_http_metadata_server=true",
            f"--http_metadata_server_port={master.metadata_port}",
            f"--metrics_port={master.metrics_port}",
            f"--eviction_high_watermark_ratio={master.eviction_high_watermark_ratio}",
        ],
        "env": [{"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}}],
        "ports": [{"name": n, "containerPort": p, "protocol": "TCP"} for n, p in ports],
        "readinessProbe": {"tcpSocket": {"port": master.rpc_port}, "periodSeconds": 5},
        "livenessProbe": {"tcpSocket": {"port": master.rpc_port}, "periodSeconds": 10, "failureThreshold": 6},
        "resources": dict(master.resources),
        "securityContext": {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}},
    }
    deployment: Manifest = {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": 1,  # the master holds the object index: exactly one
            "strategy": {"type": "Recreate"},
            "selector": {"matchLabels": selector_labels(pool, MOONCAKE_MASTER)},
            "template": {
                "metadata": {"labels": dict(meta["labels"])},
                "spec": {
                    "containers": [container],
                    "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
                },
            },
        },
    }
    service: Manifest = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(pool, name, MOONCAKE_MASTER),
        "spec": {
            "selector": selector_labels(pool, MOONCAKE_MASTER),
            "ports": [{"name": n, "port": p, "targetPort": p, "protocol": "TCP"} for n, p in ports],
        },
    }
    return [deployment, service]
