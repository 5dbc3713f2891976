"""Model-server Deployments (vLLM): one per role, with KV events, the global KV tier and PD transfer.

Every vLLM flag rendered here is in vLLM's engine arguments for the pinned image (v0.32.0; see
https://docs.vllm.ai/en/v0.32.0/configuration/engine_args.html and ``vllm serve --help``):
``--port``, ``--served-model-name``, ``--tensor-parallel-size``, ``--data-parallel-size``,
``--block-size``, ``--max-model-len``, ``--kv-cache-dtype``, ``--gpu-memory-utilization``,
``--enable-prefix-caching``, ``--kv-events-config``, ``--kv-transfer-config``. The routing sidecar's
flags (``--port``, ``--vllm-port``, ``--data-parallel-size``, ``--kv-connector``,
``--mooncake-bootstrap-port``, ``--secure-proxy``) are llm-d's pd-sidecar options
(llm-d/llm-d-inference-scheduler ``cmd/pd-sidecar``, later ``pkg/sidecar`` options, llm-d-router
from v0.9.0: ``--secure-proxy`` defaults to true, so the render passes false: the gateway and the
picker speak plain HTTP to pods); which connector each ``pdConnector`` uses: ``sidecar.py``.
"""

from __future__ import annotations

import json
from dataclasses import dataclass, field
from typing import Any

from smetric.core.names import ROLE_BOTH, ROLE_DECODE, ROLE_LABEL, ROLE_PREFILL
from smetric.operator.meta import MODEL_SERVER, Manifest, PoolRef, metadata, selector_labels
from smetric.operator.render_kv import (
    LMCACHE_CONFIG_DIR,
    LMCACHE_CONFIG_FILE,
    lmcache_connector,
    lmcache_launcher,
)
from smetric.operator.sidecar import MOONCAKE_BOOTSTRAP_PORT, PD_PROTOCOLS, connector_args, sidecar_image
from smetric.operator.spec import PodOverrides, SMetricPoolSpec, quantity_bytes

ENGINE_PORT = 8000  # the endpoint port the InferencePool targets (sidecar port on decode pods)
DECODE_VLLM_PORT = 8200  # decode vLLM behind the routing sidecar (llm-d convention)
KV_EVENTS_PORT = 5557
GPU_RESOURCE = "nvidia.com/gpu"
GPU_PRODUCT_LABEL = "nvidia.com/gpu.product"


@dataclass(frozen=True, slots=True)
class Role:
    name: str  # llm-d.ai/role value
    replicas: int
    tensor_parallel_size: int = 1
    gpus_per_pod: int = 1
    autoscaled: bool = False
    extra_args: tuple[str, ...] = ()
    pod: PodOverrides = field(default_factory=PodOverrides)

    @property
    def data_parallel_size(self) -> int:
        return max(1, self.gpus_per_pod // self.tensor_parallel_size)

    @property
    def sidecar(self) -> bool:
        return self.name == ROLE_DECODE

    @property
    def vllm_port(self) -> int:
        return DECODE_VLLM_PORT if self.sidecar else ENGINE_PORT


def roles(spec: SMetricPoolSpec) -> list[Role]:
    topo = spec.topology
    tp, gpus = spec.model.tensor_parallel_size, spec.gpus.count_per_pod
    if topo.mode == "colocated":
        return [Role(ROLE_BOTH, topo.replicas or 0, tp, gpus, topo.autoscaled)]
    assert topo.prefill is not None and topo.decode is not None  # enforced by the spec validator
    return [
        Role(
            name,
            r.replicas,
            r.tensor_parallel_size or tp,
            gpus if r.gpus_per_pod is None else r.gpus_per_pod,
            r.autoscaled,
            r.extra_args,
            r.pod,
        )
        for name, r in ((ROLE_PREFILL, topo.prefill), (ROLE_DECODE, topo.decode))
    ]


def mooncake_connector_extra_config(spec: SMetricPoolSpec) -> dict[str, Any]:
    """vLLM MooncakeConnector's transfer-engine settings from ``globalKV.protocol`` and
    ``globalKV.deviceNames`` (the pool's one description of its KV network). vLLM 0.32.0 reads
    ``mooncake_protocol`` (default ``"rdma"``) and ``device_name`` (default ``""``) from the
    connector's own ``kv_connector_extra_config`` and passes both to ``TransferEngine.initialize``
    (vllm/distributed/kv_transfer/kv_connector/v1/mooncake/mooncake_connector.py 1202-1213); inside
    a MultiConnector each child keeps its own extra config (v1/multi_connector.py 161-189).
    ``device_name`` is Mooncake's comma-separated NIC filter (Mooncake
    mooncake-integration/transfer_engine/transfer_engine_py.cpp 144-152, ``buildDeviceFilter``);
    empty lets Mooncake discover the NICs. Without it vLLM's rdma default fails on a TCP-only pool."""
    kv = spec.global_kv
    return {"mooncake_protocol": kv.protocol, "device_name": ",".join(kv.device_names)}


def kv_transfer_config(pool: PoolRef, spec: SMetricPoolSpec, role: Role) -> dict[str, Any] | None:
    """The ``--kv-transfer-config`` for this role, or None when the engine needs no connector. The
    global tier's LMCache connector follows ``globalKV.loadMode`` (:func:`lmcache_connector`)."""
    global_kv = spec.global_kv.enabled
    if spec.topology.mode == "colocated":
        return lmcache_connector(pool, spec) if global_kv else None
    connector = PD_PROTOCOLS[spec.topology.pd_connector].vllm
    if connector == "NixlConnector":
        pd: dict[str, Any] = {"kv_connector": connector, "kv_role": "kv_both"}
    else:  # MooncakeConnector: the prefiller pushes, the decoder receives
        pd = {
            "kv_connector": connector,
            "kv_role": "kv_producer" if role.name == ROLE_PREFILL else "kv_consumer",
            "kv_connector_extra_config": mooncake_connector_extra_config(spec),
        }
    if not global_kv:
        return pd
    return {
        "kv_connector": "MultiConnector",
        "kv_role": pd["kv_role"],
        "kv_connector_extra_config": {"connectors": [pd, lmcache_connector(pool, spec)]},
    }


def kv_events_config(spec: SMetricPoolSpec) -> dict[str, Any]:
    # $(POD_IP) is expanded by the kubelet (POD_IP is declared before use in the container env).
    return {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": f"tcp://*:{KV_EVENTS_PORT}",
        "topic": f"kv@$(POD_IP):{ENGINE_PORT}@{spec.model.served}",
    }


def engine_argv(pool: PoolRef, spec: SMetricPoolSpec, role: Role) -> list[str]:
    """``vllm serve ...`` argv (or the custom ``model.command`` followed by ``extraArgs``)."""
    model = spec.model
    if model.command:
        return [*model.command, *model.extra_args, *role.extra_args]
    argv = ["vllm", "serve", model.name, "--port", str(role.vllm_port), "--served-model-name", model.served]
    argv += ["--tensor-parallel-size", str(role.tensor_parallel_size), "--block-size", str(model.block_size)]
    if role.data_parallel_size > 1:
        argv += ["--data-parallel-size", str(role.data_parallel_size)]
    if model.max_model_len is not None:
        argv += ["--max-model-len", str(model.max_model_len)]
    if model.kv_cache_dtype != "auto":
        argv += ["--kv-cache-dtype", model.kv_cache_dtype]
    if model.gpu_memory_utilization is not None:
        argv += ["--gpu-memory-utilization", str(model.gpu_memory_utilization)]
    argv += ["--enable-prefix-caching", "--kv-events-config", _json(kv_events_config(spec))]
    transfer = kv_transfer_config(pool, spec, role)
    if transfer is not None:
        argv += ["--kv-transfer-config", _json(transfer)]
    return [*argv, *model.extra_args, *role.extra_args]


def _json(value: object) -> str:
    return json.dumps(value, separators=(",", ":"))


def model_storage_env(spec: SMetricPoolSpec) -> list[dict[str, Any]]:
    """HF_HOME on the weights volume (offline when read-only) and HF_TOKEN from its Secret."""
    env: list[dict[str, Any]] = []
    storage = spec.model.storage
    if storage is not None and storage.hf_cache:
        env.append({"name": "HF_HOME", "value": storage.mount_path})
        if storage.read_only:
            env.append({"name": "HF_HUB_OFFLINE", "value": "1"})
    secret = spec.model.hf_token_secret
    if secret is not None:
        env.append(
            {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": secret.name, "key": secret.key}}}
        )
    return env


def model_volume(spec: SMetricPoolSpec) -> tuple[dict[str, Any], dict[str, Any]] | None:
    """``(volume, volumeMount)`` of the weights PVC, or None without ``model.storage``."""
    storage = spec.model.storage
    if storage is None:
        return None
    volume = {
        "name": "model",
        "persistentVolumeClaim": {"claimName": storage.claim_name, "readOnly": storage.read_only},
    }
    return volume, {"name": "model", "mountPath": storage.mount_path, "readOnly": storage.read_only}


def engine_env(spec: SMetricPoolSpec, role: Role | None = None) -> list[dict[str, Any]]:
    env: list[dict[str, Any]] = [
        {"name": "POD_IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
        {"name": "PYTHONHASHSEED", "value": spec.router.hash_seed},
    ]
    if spec.global_kv.enabled:
        env.append({"name": "LMCACHE_CONFIG_FILE", "value": LMCACHE_CONFIG_FILE})
    if spec.topology.mode == "disaggregated" and spec.topology.pd_connector == "nixl":
        env.append({"name": "VLLM_NIXL_SIDE_CHANNEL_HOST", "value": "$(POD_IP)"})
    if spec.topology.mode == "disaggregated" and spec.topology.pd_connector == "mooncake":
        # the port the decode pods' sidecar asks the prefiller's bootstrap server for its engine id
        env.append({"name": "VLLM_MOONCAKE_BOOTSTRAP_PORT", "value": str(MOONCAKE_BOOTSTRAP_PORT)})
    env += model_storage_env(spec)
    env += [*spec.model.env, *spec.engine.pod.env, *(role.pod.env if role else ())]
    return env


def host_memory_bytes(spec: SMetricPoolSpec) -> int:
    """Host memory one GPU engine pod needs: the vLLM process (``engine.hostMemory``), the /dev/shm
    emptyDir (memory-backed, charged to the pod) and the global tier's buffers (the Mooncake segment
    each engine contributes, LMCache's transfer buffer and local CPU cache are pinned host memory)."""
    total = quantity_bytes(spec.engine.host_memory) + quantity_bytes(spec.gpus.shm_size)
    kv = spec.global_kv
    if kv.enabled:
        total += quantity_bytes(kv.segment_size) + quantity_bytes(kv.local_buffer_size)
        total += int(kv.lmcache.max_local_cpu_size_gb * 2**30)
    return total


def _gi(n_bytes: int) -> str:
    return f"{-(-n_bytes // 2**30)}Gi"


def _resources(spec: SMetricPoolSpec, role: Role) -> dict[str, Any]:
    user: dict[str, Any] = {}
    for layer in (spec.gpus.resources, spec.engine.pod.resources, role.pod.resources):
        for kind in ("limits", "requests"):
            user.setdefault(kind, {}).update(layer.get(kind, {}))
    limits: dict[str, Any] = dict(user.get("limits", {}))
    requests: dict[str, Any] = dict(user.get("requests", {}))
    if role.gpus_per_pod > 0:  # 0 = CPU-only pool (the emulator on kind)
        limits[GPU_RESOURCE] = requests[GPU_RESOURCE] = role.gpus_per_pod
        needed = host_memory_bytes(spec)
        asked = requests.get("memory")
        if asked is None or quantity_bytes(str(asked)) < needed:
            requests["memory"] = _gi(needed)
        if "memory" in limits and quantity_bytes(str(limits["memory"])) < quantity_bytes(
            str(requests["memory"])
        ):
            limits["memory"] = requests["memory"]
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


def container_security(add_caps: tuple[str, ...] = ()) -> dict[str, Any]:
    caps: dict[str, Any] = {"drop": ["ALL"]}
    if add_caps:
        caps["add"] = list(add_caps)
    return {"allowPrivilegeEscalation": False, "capabilities": caps}


def engine_container(pool: PoolRef, spec: SMetricPoolSpec, role: Role) -> dict[str, Any]:
    argv = engine_argv(pool, spec, role)
    if spec.global_kv.enabled and not spec.model.command:
        command, args = lmcache_launcher(pool, spec), argv
    else:
        command, args = argv[:2], argv[2:]
    mounts: list[dict[str, Any]] = [{"name": "dshm", "mountPath": "/dev/shm"}]
    if spec.global_kv.enabled:
        mounts.append({"name": "lmcache-config", "mountPath": LMCACHE_CONFIG_DIR})
    model = model_volume(spec)
    if model is not None:
        mounts.append(model[1])
    mounts += [*spec.engine.pod.volume_mounts, *role.pod.volume_mounts]
    container: dict[str, Any] = {
        "name": "vllm",
        "image": spec.model.image,
        "command": command,
        "args": args,
        "env": engine_env(spec, role),
        "ports": [
            {"name": "http", "containerPort": role.vllm_port, "protocol": "TCP"},
            {"name": "kv-events", "containerPort": KV_EVENTS_PORT, "protocol": "TCP"},
        ],
        "resources": _resources(spec, role),
        "volumeMounts": mounts,
        **_probes(role.vllm_port),
        # Long agent streams: stay up while the endpoint leaves the pool and open streams finish.
        "lifecycle": {"preStop": {"exec": {"command": ["/bin/sh", "-c", f"sleep {spec.engine.drain_s}"]}}},
        "securityContext": container_security(("IPC_LOCK",) if spec.gpus.rdma is not None else ()),
    }
    return container


def sidecar_container(spec: SMetricPoolSpec, role: Role) -> dict[str, Any]:
    """llm-d routing sidecar: forwards to the prefiller named by ``x-prefiller-host-port`` first.

    ``--secure-proxy=false``: the sidecar serves TLS by default, but the InferencePool endpoint
    (this port) is reached over plain HTTP by the gateway and scraped by the picker."""
    topo = spec.topology
    sidecar = topo.routing_sidecar
    args = [
        f"--port={ENGINE_PORT}",
        f"--vllm-port={DECODE_VLLM_PORT}",
        # the kv_transfer_params protocol of the engines' connector (smetric.operator.sidecar)
        *connector_args(topo.pd_connector, sidecar.tag),
        "--secure-proxy=false",
    ]
    if role.data_parallel_size > 1:
        args.append(f"--data-parallel-size={role.data_parallel_size}")
    return {
        "name": "routing-sidecar",
        "image": sidecar_image(topo.pd_connector, sidecar.image, sidecar.tag),
        "restartPolicy": "Always",  # native sidecar (init container that keeps running)
        "args": args,
        "ports": [{"name": "http", "containerPort": ENGINE_PORT, "protocol": "TCP"}],
        "readinessProbe": {"tcpSocket": {"port": ENGINE_PORT}, "periodSeconds": 5},
        "resources": {"requests": {"cpu": "500m", "memory": "256Mi"}, "limits": {"memory": "1Gi"}},
        "securityContext": {**container_security(), "runAsNonRoot": True, "readOnlyRootFilesystem": True},
    }


def _pod_spec(pool: PoolRef, spec: SMetricPoolSpec, role: Role) -> dict[str, Any]:
    volumes: list[dict[str, Any]] = [
        {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": spec.gpus.shm_size}}
    ]
    if spec.global_kv.enabled:
        volumes.append({"name": "lmcache-config", "emptyDir": {}})
    model = model_volume(spec)
    if model is not None:
        volumes.append(model[0])
    volumes += [*spec.engine.pod.volumes, *role.pod.volumes]
    tolerations = [
        {"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"},
        *spec.gpus.tolerations,
        *spec.engine.pod.tolerations,
        *role.pod.tolerations,
    ]
    pod: dict[str, Any] = {
        "containers": [engine_container(pool, spec, role)],
        "volumes": volumes,
        "tolerations": tolerations,
        "terminationGracePeriodSeconds": spec.engine.drain_s + 30,
        "securityContext": {"seccompProfile": {"type": "RuntimeDefault"}},
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
    if role.gpus_per_pod == 0:  # CPU-only: no GPU toleration needed
        pod["tolerations"] = tolerations[1:]
    apply_pod_overrides(pod, spec.engine.pod, role.pod)
    if role.sidecar:
        pod["initContainers"] = [sidecar_container(spec, role)]
    return pod


def apply_pod_overrides(pod: dict[str, Any], *layers: PodOverrides) -> None:
    """nodeSelector/annotations merge; affinity keys (nodeAffinity, podAntiAffinity, ...) replace the
    generated ones; imagePullSecrets accumulate; the last layer wins."""
    for layer in layers:
        if layer.node_selector:
            pod.setdefault("nodeSelector", {}).update(layer.node_selector)
        if layer.affinity:
            pod.setdefault("affinity", {}).update(layer.affinity)
        if layer.image_pull_secrets:
            pod.setdefault("imagePullSecrets", []).extend(layer.image_pull_secrets)
        if layer.priority_class_name:
            pod["priorityClassName"] = layer.priority_class_name
    if not pod.get("tolerations"):
        pod.pop("tolerations", None)


def pod_annotations(*layers: PodOverrides) -> dict[str, str]:
    out: dict[str, str] = {}
    for layer in layers:
        out.update(layer.annotations)
    return out


def engine_deployment(pool: PoolRef, spec: SMetricPoolSpec, role: Role) -> Manifest:
    role_labels = {ROLE_LABEL: role.name}
    selector = {**selector_labels(pool, MODEL_SERVER), **role_labels}
    meta = metadata(pool, pool.child(role.name), MODEL_SERVER, role_labels)
    template_meta: dict[str, Any] = {"labels": dict(meta["labels"])}
    annotations = pod_annotations(spec.engine.pod, role.pod)
    if annotations:
        template_meta["annotations"] = annotations
    deployment_spec: dict[str, Any] = {
        "replicas": role.replicas,
        "selector": {"matchLabels": selector},
        # GPUs are scarce: replace pods in place rather than surging past the pool's GPU budget.
        "strategy": {"type": "RollingUpdate", "rollingUpdate": {"maxSurge": 0, "maxUnavailable": 1}},
        "template": {"metadata": template_meta, "spec": _pod_spec(pool, spec, role)},
    }
    if role.autoscaled:
        # Server-side apply: a field this manager does not send is left to its owner (the HPA/KEDA).
        del deployment_spec["replicas"]
    return {"apiVersion": "apps/v1", "kind": "Deployment", "metadata": meta, "spec": deployment_spec}


def pod_disruption_budgets(pool: PoolRef, spec: SMetricPoolSpec) -> list[Manifest]:
    """maxUnavailable 1 per engine role with 2+ replicas: a node drain never empties a role."""
    if not spec.protection.pod_disruption_budget:
        return []
    out: list[Manifest] = []
    for role in roles(spec):
        if role.replicas < 2 and not role.autoscaled:
            continue
        out.append(
            {
                "apiVersion": "policy/v1",
                "kind": "PodDisruptionBudget",
                "metadata": metadata(pool, pool.child(role.name), MODEL_SERVER, {ROLE_LABEL: role.name}),
                "spec": {
                    "maxUnavailable": 1,
                    "selector": {
                        "matchLabels": {**selector_labels(pool, MODEL_SERVER), ROLE_LABEL: role.name}
                    },
                },
            }
        )
    return out


def engine_deployments(pool: PoolRef, spec: SMetricPoolSpec) -> list[Manifest]:
    return [engine_deployment(pool, spec, role) for role in roles(spec)]
