"""Model-server Deployments (vLLM): one per role, with KV events, the global KV tier and PD transfer."""

from __future__ import annotations

import json
from dataclasses import dataclass
from typing import Any

from smetric.core.names import ROLE_BOTH, ROLE_DECODE, ROLE_LABEL, ROLE_PREFILL
from smetric.operator.meta import MODEL_SERVER, Manifest, PoolRef, metadata, selector_labels
from smetric.operator.render_kv import LMCACHE_CONFIG_DIR, LMCACHE_CONFIG_FILE, lmcache_launcher
from smetric.operator.spec import SMetricPoolSpec

ENGINE_PORT = 8000  # the endpoint port the InferencePool targets (sidecar port on decode pods)
DECODE_VLLM_PORT = 8200  # decode vLLM behind the routing sidecar (llm-d convention)
KV_EVENTS_PORT = 5557
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"

_LMCACHE_CONNECTOR = {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"}


@dataclass(frozen=True, slots=True)
class Role:
    name: str  # llm-d.ai/role value
    replicas: int

    @property
    def sidecar(self) -> bool:
        return self.name == ROLE_DECODE

    @property
    def vllm_port(self) -> int:
        return DECODE_VLLM_PORT if self.sidecar else ENGINE_PORT


def roles(spec: SMetricPoolSpec) -> list[Role]:
    topo = spec.topology
    if topo.mode == "colocated":
        return [Role(ROLE_BOTH, topo.replicas or 0)]
    assert topo.prefill is not None and topo.decode is not None  # enforced by the spec validator
    return [Role(ROLE_PREFILL, topo.prefill.replicas), Role(ROLE_DECODE, topo.decode.replicas)]


def kv_transfer_config(spec: SMetricPoolSpec, role: Role) -> dict[str, Any] | None:
    """The ``--kv-transfer-config`` for this role, or None when the engine needs no connector."""
    global_kv = spec.global_kv.enabled
    if spec.topology.mode == "colocated":
        return dict(_LMCACHE_CONNECTOR) if global_kv else None
    if spec.topology.pd_connector == "nixl":
        pd: dict[str, Any] = {"kv_connector": "NixlConnector", "kv_role": "kv_both"}
    else:
        pd = {
            "kv_connector": "MooncakeConnector",
            "kv_role": "kv_producer" if role.name == ROLE_PREFILL else "kv_consumer",
        }
    if not global_kv:
        return pd
    return {
        "kv_connector": "MultiConnector",
        "kv_role": pd["kv_role"],
        "kv_connector_extra_config": {"connectors": [pd, dict(_LMCACHE_CONNECTOR)]},
    }


def kv_events_config(spec: SMetricPoolSpec) -> dict[str, Any]:
    # $(POD_IP) is expanded by the kubelet (POD_IP is declared before use in the container env).
    return {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{KV_EVENTS_PORT}",
        "topic": f"kv@$(POD_IP):{ENGINE_PORT}@{spec.model.served}",
    }


def engine_argv(spec: SMetricPoolSpec, role: Role) -> list[str]:
    """``vllm serve ...`` argv (or the custom ``model.command`` followed by ``extraArgs``)."""
    model = spec.model
    if model.command:
        return [*model.command, *model.extra_args]
    argv = ["vllm", "serve", model.name, "--port", str(role.vllm_port), "--served-model-name", model.served]
    argv += ["--tensor-parallel-size", str(model.tensor_parallel_size), "--block-size", str(model.block_size)]
    data_parallel = max(1, spec.gpus.count_per_pod // model.tensor_parallel_size)
    if data_parallel > 1:
        argv += ["--data-parallel-size", str(data_parallel)]
    if model.max_model_len is not None:
        argv += ["--max-model-len", str(model.max_model_len)]
    argv += ["--enable-prefix-caching", "--kv-events-config", _json(kv_events_config(spec))]
    transfer = kv_transfer_config(spec, role)
    if transfer is not None:
        argv += ["--kv-transfer-config", _json(transfer)]
    return [*argv, *model.extra_args]


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def engine_env(spec: SMetricPoolSpec) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "PYTHONHASHSEED", "value": spec.router.hash_seed},
    ]
    if spec.global_kv.enabled:
        env.append({"name": "LMCACHE_CONFIG_FILE", "value": LMCACHE_CONFIG_FILE})
    if spec.topology.mode == "disaggregated" and spec.topology.pd_connector == "nixl":
        env.append({"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "value": "$(POD_IP)"})
    return env


def _resources(spec: SMetricPoolSpec) -> dict[str, Any]:
    user = spec.gpus.resources
    limits: dict[str, Any] = dict(user.get("limits", {}))
    requests: dict[str, Any] = dict(user.get("requests", {}))
    if spec.gpus.count_per_pod > 0:  # 0 = CPU-only pool (the emulator on kind)
        limits[GPU_RESOURCE] = requests[GPU_RESOURCE] = spec.gpus.count_per_pod
    if spec.gpus.rdma is not None:
        limits[spec.gpus.rdma.resource_name] = spec.gpus.rdma.count
        requests[spec.gpus.rdma.resource_name] = spec.gpus.rdma.count
    return {"limits": limits, "requests": requests}


def _probes(port: int) -> dict[str, Any]:
    def get(period_s: int, failures: int) -> dict[str, Any]:
        return {
            "httpGet": {"path": "/health", "port": port},
            "periodSeconds": period_s,
            "failureThreshold": failures,
            "timeoutSeconds": 5,
        }

    # Loading a 30B model can take many minutes: the startup probe allows up to one hour.
    return {"startupProbe": get(10, 360), "readinessProbe": get(5, 3), "livenessProbe": get(10, 6)}


def engine_container(pool: PoolRef, spec: SMetricPoolSpec, role: Role) -> dict[str, Any]:
    argv = engine_argv(spec, role)
    if spec.global_kv.enabled and not spec.model.command:
        command, args = lmcache_launcher(pool, spec), argv
    else:
        command, args = argv[:2], argv[2:]
    mounts = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if spec.global_kv.enabled:
        mounts.append({"name": "lmcache-config", "mountPath": LMCACHE_CONFIG_DIR})
    container: dict[str, Any] = {
        "name": "vllm",
        "image": spec.model.image,
        "command": command,
        "args": args,
        "env": engine_env(spec),
        "ports": [
            {"name": "http", "containerPort": role.vllm_port, "protocol": "TCP"},
            {"name": "kv-events", "containerPort": KV_EVENTS_PORT, "protocol": "TCP"},
        ],
        "resources": _resources(spec),
        "volumeMounts": mounts,
        **_probes(role.vllm_port),
    }
    if spec.gpus.rdma is not None:
        container["securityContext"] = {"capabilities": {"add": ["IPC_LOCK"]}}
    return container


def sidecar_container(spec: SMetricPoolSpec) -> dict[str, Any]:
    """llm-d routing sidecar: forwards to the prefiller named by ``x-prefiller-host-port`` first."""
    sidecar = spec.topology.routing_sidecar
    return {
        "name": "routing-sidecar",
        "image": f"{sidecar.image}:{sidecar.tag}",
        "restartPolicy": "Always",  # native sidecar (init container that keeps running)
        "args": [f"--port={ENGINE_PORT}", f"--vllm-port={DECODE_VLLM_PORT}", "--connector=nixlv2"],
        "ports": [{"name": "http", "containerPort": ENGINE_PORT, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": ENGINE_PORT}, "periodSeconds": 5},
    }


def _pod_spec(pool: PoolRef, spec: SMetricPoolSpec, role: Role) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.gpus.shm_size}}
    ]
    if spec.global_kv.enabled:
        volumes.append({"name": "lmcache-config", "emptyDir": {}})
    tolerations = [
        {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},
        *spec.gpus.tolerations,
    ]
    pod: dict[str, Any] = {
        "containers": [engine_container(pool, spec, role)],
        "volumes": volumes,
        "tolerations": tolerations,
        "affinity": {
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {
                            "matchExpressions": [
                                {
                                    "key": GPU_PRODUCT_LABEL,
                                    "operator": "In",
                                    "values": list(spec.gpus.products),
                                }
                            ]
                        }
                    ]
                }
            }
        },
    }
    if not spec.gpus.products:
        del pod["affinity"]
    if role.sidecar:
        pod["initContainers"] = [sidecar_container(spec)]
    return pod


def engine_deployment(pool: PoolRef, spec: SMetricPoolSpec, role: Role) -> Manifest:
    role_labels = {ROLE_LABEL: role.name}
    selector = {**selector_labels(pool, MODEL_SERVER), **role_labels}
    meta = metadata(pool, pool.child(role.name), MODEL_SERVER, role_labels)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": role.replicas,
            "selector": {"matchLabels": selector},
            # GPUs are scarce: replace pods in place rather than surging past the pool's GPU budget.
            "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
            "template": {"metadata": {"labels": dict(meta["labels"])}, "spec": _pod_spec(pool, spec, role)},
        },
    }


def engine_deployments(pool: PoolRef, spec: SMetricPoolSpec) -> list[Manifest]:
    return [engine_deployment(pool, spec, role) for role in roles(spec)]
