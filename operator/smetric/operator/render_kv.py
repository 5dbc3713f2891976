"""The cluster-wide global KV tier: Mooncake master (Deployment + Service), each engine's LMCache
file and the LMCache entry of its ``--kv-transfer-config``.

``globalKV.loadMode`` picks the connector (docs/operator.md, "Global-tier load mode"; sources
checked in vLLM 0.32.0 and LMCache 0.5.6):

* ``sync``: ``LMCacheConnectorV1``. vLLM's wrapper returns ``(n, False)`` from
  ``get_num_new_matched_tokens`` (vllm/distributed/kv_transfer/kv_connector/v1/lmcache_connector.py
  265-285), so the load is a synchronous one that precedes the step's forward
  (vllm/v1/worker/kv_connector_model_runner_mixin.py 79-85), and LMCache retrieves request after
  request with a blocking ``retrieve`` (lmcache/integration/vllm/vllm_v1_adapter.py 756-870). The
  LMCache file below configures it.
* ``async``: ``LMCacheMPConnector``: ``(need_to_load, need_to_load > 0)``
  (lmcache/integration/vllm/lmcache_mp_connector.py 1351, which vLLM uses when LMCache is installed:
  lmcache_mp_connector.py 1191-1217), so vLLM parks the request in ``WAITING_FOR_REMOTE_KVS``
  (vllm/v1/core/sched/scheduler.py 1320-1323) and the batch runs on. It talks to an LMCache server
  process (``lmcache.mp.host``/``lmcache.mp.port``, default tcp://localhost:5555); the connector
  starts it in the engine container (``lmcache.mp.autostart``, local hosts only:
  lmcache/integration/vllm/mp_server_launcher.py 26-31, 315-329) with Mooncake as its
  ``mooncake_store`` L2 adapter, whose setup keys are Mooncake's dict ``setup`` keys (the ones the
  LMCache file passes: lmcache/v1/storage_backend/connector/mooncakestore_connector.py 26-34, passed
  through as-is: 134-143, defaults ``protocol: tcp``, ``device_name: ""``: 145-150; the L2 adapter
  forwards every key but ``type``/``num_workers``/``eviction``/``per_op_workers``:
  lmcache/v1/distributed/l2_adapters/mooncake_store_l2_adapter.py 37-42, 82-115). vLLM's
  MooncakeConnector (``pdConnector: mooncake``) gets the same protocol and devices:
  ``render_engine.mooncake_connector_extra_config``.
"""

from __future__ import annotations

import json
import shlex
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
        # what LMCache writes, rendered explicitly at LMCache 0.5.6's defaults (lmcache/v1/config.py
        # 126-130 and 385-389), which the simulator models (smetric.engine.global_tier.GlobalPath): the
        # prompt's whole chunks, no decode tokens
        "save_decode_cache: false",
        "save_unfull_chunk: false",
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


LMCACHE_MP_PORT = 5555  # LMCacheMPConnector's default lmcache.mp.port (vLLM 0.32.0, LMCache 0.5.6)
LMCACHE_L1_EVICTION_POLICY = "LRU"  # the async path's LMCache server L1 (lmcache_server_args)


def lmcache_connector(pool: PoolRef, spec: SMetricPoolSpec) -> dict[str, Any]:
    """The LMCache connector of ``--kv-transfer-config`` for ``globalKV.loadMode``."""
    if spec.global_kv.load_mode == "sync":
        return {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}
    return {
        "kv_connector": "LMCacheMPConnector",
        "kv_role": "kv_both",
        "kv_connector_extra_config": {
            "lmcache.mp.host": "tcp://localhost",
            "lmcache.mp.port": LMCACHE_MP_PORT,
            "lmcache.mp.autostart": True,
            "lmcache.mp.autostart.server_args": lmcache_server_args(pool, spec),
        },
    }


def lmcache_server_args(pool: PoolRef, spec: SMetricPoolSpec, pod_ip: str = "$(POD_IP)") -> str:
    """``lmcache server`` options of the async path (the connector adds ``--host``/``--port``):
    chunk size, the CPU L1 cache with its eviction policy and Mooncake as the L2 adapter, set up
    as the LMCache file sets up LMCacheConnectorV1's Mooncake backend. ``pod_ip`` is expanded by
    the kubelet. LMCache 0.5.6's server refuses an L1 size without ``--eviction-policy`` (no
    default: lmcache/v1/distributed/config.py 905-913, 1071-1074); LRU is the policy its own
    hint names (lmcache/integration/vllm/vllm_multi_process_adapter.py 321)."""
    kv = spec.global_kv
    host = pool.mooncake_host()
    master = kv.master
    l2 = {
        "type": "mooncake_store",
        "local_hostname": pod_ip,
        "metadata_server": f"http://{host}:{master.metadata_port}/metadata",
        "master_server_address": f"{host}:{master.rpc_port}",
        "protocol": kv.protocol,
        "device_name": ",".join(kv.device_names),
        "global_segment_size": str(quantity_bytes(kv.segment_size)),
        "local_buffer_size": str(quantity_bytes(kv.local_buffer_size)),
    }
    args = [
        "--chunk-size",
        str(kv.lmcache.chunk_size),
        "--l1-size-gb",
        str(kv.lmcache.max_local_cpu_size_gb),
        "--eviction-policy",
        LMCACHE_L1_EVICTION_POLICY,
        "--l2-adapter",
        json.dumps(l2, separators=(",", ":")),
    ]
    return shlex.join(args)


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
