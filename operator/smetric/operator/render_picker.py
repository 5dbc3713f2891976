"""The endpoint picker: policy ConfigMap, RBAC, Deployment, its h2c Service and PodDisruptionBudget.

Restarts: the picker writes its prefix index (either kind) to ``--state-file`` on an ``emptyDir``
volume every ``--state-interval-ms`` and at SIGTERM, and reads it at start, so a restarted container
(a crash, an OOM kill, a failed liveness probe) routes follow-up turns where its predecessor did.
A new pod (a rollout, a drained node) starts without the file; with 2+ replicas and the precise
index (the defaults) the other replicas hold the same KV-event view meanwhile. 2+ replicas get a
PodDisruptionBudget (maxUnavailable 1) and a rolling update that starts the new pod first, and a
headless Service ``<pool>-epp-peers`` for ``--peers``: the replicas share the Responses follow-up map
(a starting replica restores a peer's snapshot; each pushes the response ids it learns to all).
"""

from __future__ import annotations

import hashlib
from typing import Any

import yaml

from smetric.core.pickerflags import render_args
from smetric.core.presets import PRESETS, InstancePreset, get_preset, variant_name
from smetric.operator.meta import EPP, Manifest, PoolRef, metadata, selector_labels
from smetric.operator.render_engine import (
    KV_EVENTS_PORT,
    apply_pod_overrides,
    container_security,
    model_storage_env,
    model_volume,
    pod_annotations,
    roles,
)
from smetric.operator.spec import SMetricPoolSpec
from smetric.operator.spec_rules import quantity_bytes

GRPC_PORT = 9002
HEALTH_PORT = 9003
METRICS_PORT = 9090
SNAPSHOT_PORT = 9004  # 2+ replicas: GET /snapshot, POST /responses between the replicas
CONFIG_DIR = "/etc/smetric"
CONFIG_FILE = f"{CONFIG_DIR}/config.yaml"
CONFIG_HASH_ANNOTATION = "smetric.io/config-hash"
TLS_DIR = "/etc/smetric/tls"
STATE_DIR = "/var/lib/smetric"  # emptyDir: outlives a container restart, not the pod
STATE_FILE = f"{STATE_DIR}/prefix-index.json"
HF_CACHE_DIR = "/var/cache/huggingface"  # writable hub cache when no model volume is mounted
PICKER_UID = 65532  # the smetric-epp image's user (images/epp.Dockerfile)


def policy_config(spec: SMetricPoolSpec) -> dict[str, Any]:
    """The picker's ``config.yaml`` (``smetric.epp.config``): policy name + parameters (camelCase,
    parsed by ``smetric.policy.params_from_mapping``) and PD routing for disaggregated pools."""
    params = spec.router.parameters
    parameters: dict[str, Any] = {
        **params.policy_owned,
        "mode": spec.topology.mode,
        "ttftSloBaseS": params.ttft_slo_base_s,
        "ttftSloPerKTokS": params.ttft_slo_per_k_tok_s,
        "tpotSloS": params.tpot_slo_s,
        "blockTokens": spec.model.block_size,  # CRD model.blockSize = picker key blockTokens
    }
    if params.cost_model is not None:
        parameters["costModel"] = {"cLinS": params.cost_model.c_lin_s, "cAttS": params.cost_model.c_att_s}
    if spec.global_kv.enabled:
        fetch = params.global_fetch_s_per_token
        if fetch is None:
            fetch = default_global_fetch_s_per_token(spec)
        if fetch is not None:
            parameters["globalFetchSPerToken"] = fetch
            parameters["globalChunkTokens"] = spec.global_kv.lmcache.chunk_size  # LMCache's write unit
        segment = params.global_segment_tokens
        if segment is None:
            segment = default_global_segment_tokens(spec)
        if segment is not None:
            parameters["globalSegmentTokens"] = segment
    config: dict[str, Any] = {
        "policy": {"name": spec.routing_policy, "parameters": parameters},
        "pdDisaggregation": {"enabled": spec.topology.mode == "disaggregated"},
    }
    served = served_models(spec)
    if served:
        config["servedModels"] = list(served)
    # the picker config's flowControl, same camelCase keys; rendered off too, so the pool's choice
    # never depends on the picker's own default
    config["flowControl"] = spec.router.flow_control.model_dump(by_alias=True)
    return config


# vLLM flags that make an engine serve names besides --served-model-name <model.served>: more served
# names, LoRA adapters listed at start or loaded at run time (vLLM 0.32 engine / OpenAI server args).
EXTRA_NAME_FLAGS = ("--served-model-name", "--lora-modules", "--enable-lora")


def served_models(spec: SMetricPoolSpec) -> tuple[str, ...]:
    """The model names the pool's engines serve when the spec names them all: ``model.served``
    for a ``vllm serve`` the operator renders (``--served-model-name model.served``). Empty (the
    picker then reads each engine's ``/v1/models``) for a custom ``model.command`` or extra
    arguments that add names (:data:`EXTRA_NAME_FLAGS`). The picker answers 404 for any other
    model and labels its metrics with these names only."""
    if spec.model.command:
        return ()
    args = [*spec.model.extra_args, *(a for role in roles(spec) for a in role.extra_args)]
    if any(a.split("=", 1)[0] in EXTRA_NAME_FLAGS for a in args):
        return ()
    return (spec.model.served,)


def pool_preset(spec: SMetricPoolSpec) -> InstancePreset | None:
    """The preset of the pool's model with its KV dtype and tensor parallelism; ``None`` for a
    model no preset describes or a parallelism the preset cannot take."""
    base = next((n for n, p in PRESETS.items() if p.model.name == spec.model.name), None)
    if base is None:
        return None
    kv = "fp8" if spec.model.kv_cache_dtype.startswith("fp8") else "bf16"
    tp = spec.model.tensor_parallel_size
    try:
        return get_preset(variant_name(base, kv_dtype=kv, tp=None if tp == PRESETS[base].n_gpus else tp))
    except ValueError:
        return None


def default_global_fetch_s_per_token(spec: SMetricPoolSpec) -> float | None:
    """Seconds to load one token's KV from the global tier for the pool's model at the calibrated
    LMCache + Mooncake throughput (``InstancePreset.global_fetch_s_per_token``), with the pool's KV
    dtype and tensor parallelism; ``None`` for a model no preset describes (the policies then
    credit local hits only)."""
    preset = pool_preset(spec)
    return None if preset is None else preset.global_fetch_s_per_token


def default_global_segment_tokens(spec: SMetricPoolSpec) -> int | None:
    """KV tokens one engine pod contributes to the global tier: its Mooncake segment
    (``globalKV.segmentSize``; render_kv's ``global_segment_size``) / the model's KV bytes per
    token. Per pod, so the picker scales it by the engines it discovers and a scale or an
    autoscaler never changes the picker's config (nor rolls it). ``None`` (fully provisioned) for
    a model without a preset."""
    preset = pool_preset(spec)
    if preset is None:
        return None
    return max(1, int(quantity_bytes(spec.global_kv.segment_size) // preset.model.kv_bytes_per_token))


def policy_config_text(spec: SMetricPoolSpec) -> str:
    return yaml.safe_dump(policy_config(spec), sort_keys=False)


# Gateways whose InferencePool cluster reads one ip:port from x-gateway-destination-endpoint: Envoy
# AI Gateway (the InferencePool path of Envoy Gateway; ai-gateway v1.1.0
# internal/extensionserver/post_cluster_modify.go l. 67-96: ORIGINAL_DST, which answers 503 to the
# picker's list) and kgateway (v2.0 endpointpicker/plugin.go processBackendObjectIR: ORIGINAL_DST;
# at the v2.1 cut, 8b11de40dc, endpointpicker/backends.go l. 49-58: a subset load balancer keyed on
# that value, where a list matches no endpoint and falls back to any). A retry there goes back to
# the same host anyway, so the picker sends them the primary alone (docs/operator.md, "Retries and
# outlier detection").
ORIGINAL_DST_PROVIDERS = ("envoy-gateway", "kgateway")


def picker_args(pool: PoolRef, spec: SMetricPoolSpec) -> list[str]:
    values: dict[str, object] = {
        "grpc-port": GRPC_PORT,
        "grpc-health-port": HEALTH_PORT,
        "metrics-port": METRICS_PORT,
        "config": CONFIG_FILE,
        "pool-name": pool.name,
        "pool-namespace": pool.namespace,
        "prefix-index": spec.prefix_index,
        "kv-events-port": KV_EVENTS_PORT,
        "hash-seed": spec.router.hash_seed,
        "block-size": spec.model.block_size,
        "secure-serving": "true" if spec.router.secure_serving else "false",
        # Its PodMonitor/ServiceMonitor scrape without a token, and the review APIs need a
        # cluster-wide binding that a namespaced child cannot carry (docs/picker.md, metrics auth).
        "metrics-endpoint-auth": "false",
        "state-file": STATE_FILE,
    }
    if spec.picker_replicas >= 2:  # the Responses follow-up map shared between the replicas
        values["snapshot-port"] = SNAPSHOT_PORT
        values["peers"] = f"{peers_service(pool)}.{pool.namespace}.svc:{SNAPSHOT_PORT}"
    if spec.router.secure_serving and spec.router.cert_secret_name:
        values["cert-path"] = TLS_DIR
    if spec.prefix_index == "precise":
        # A model id resolves through HF_HOME (the mounted hub cache, offline) or the hub (network);
        # with a plain directory volume model.name is already the path of the weights and tokenizer.
        values["tokenizer"] = spec.model.name
    if spec.router.decision_log:
        values["decision-log"] = "true"
    if spec.router.leader_election:
        values["ha-enable-leader-election"] = "true"
    if spec.gateway is not None and spec.gateway.provider in ORIGINAL_DST_PROVIDERS:
        values["destination-list"] = "primary"
    return render_args(values)


def peers_service(pool: PoolRef) -> str:
    return pool.child("epp-peers")


def _config_map(pool: PoolRef, spec: SMetricPoolSpec) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(pool, pool.child("epp-config"), EPP),
        "data": {"config.yaml": policy_config_text(spec)},
    }


# Leader election reads, creates and patches the Lease (smetric.epp.leader).
LEASE_RULE = {
    "apiGroups": ["coordination.k8s.io"],
    "resources": ["leases"],
    "verbs": ["get", "create", "update", "patch"],
}


def _rbac(pool: PoolRef, spec: SMetricPoolSpec) -> list[Manifest]:
    name = pool.epp_name
    leases = [LEASE_RULE] if spec.router.leader_election else []
    return [
        {"apiVersion": "v1", "kind": "ServiceAccount", "metadata": metadata(pool, name, EPP)},
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "Role",
            "metadata": metadata(pool, name, EPP),
            "rules": [
                {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
                {
                    "apiGroups": ["inference.networking.k8s.io"],
                    "resources": ["inferencepools"],
                    "verbs": ["get", "list", "watch"],
                },
                *leases,
            ],
        },
        {
            "apiVersion": "rbac.authorization.k8s.io/v1",
            "kind": "RoleBinding",
            "metadata": metadata(pool, name, EPP),
            "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": name},
            "subjects": [{"kind": "ServiceAccount", "name": name, "namespace": pool.namespace}],
        },
    ]


def _volumes(
    pool: PoolRef, spec: SMetricPoolSpec
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """``(volumes, mounts, env)`` of the picker: config, TLS secret, tokenizer files, /tmp."""
    volumes: list[dict[str, Any]] = [
        {"name": "config", "configMap": {"name": pool.child("epp-config")}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
        {"name": "state", "emptyDir": {"sizeLimit": "1Gi"}},
    ]
    mounts: list[dict[str, Any]] = [
        {"name": "config", "mountPath": CONFIG_DIR, "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "state", "mountPath": STATE_DIR},
    ]
    env: list[dict[str, Any]] = []
    if spec.router.secure_serving and spec.router.cert_secret_name:
        volumes.append({"name": "tls", "secret": {"secretName": spec.router.cert_secret_name}})
        mounts.append({"name": "tls", "mountPath": TLS_DIR, "readOnly": True})
    if spec.prefix_index == "precise":
        model = model_volume(spec)
        if model is not None:  # the tokenizer from the mounted weights (read-only, offline)
            volumes.append(
                {**model[0], "persistentVolumeClaim": {**model[0]["persistentVolumeClaim"], "readOnly": True}}
            )
            mounts.append({**model[1], "readOnly": True})
            env += model_storage_env(spec)
            if spec.model.storage is not None and spec.model.storage.hf_cache:
                env = [e for e in env if e["name"] != "HF_HUB_OFFLINE"] + [
                    {"name": "HF_HUB_OFFLINE", "value": "1"}
                ]
        else:  # no volume: tokenizer files from the hub at start-up (network; HF_TOKEN if gated)
            volumes.append({"name": "hf-cache", "emptyDir": {"sizeLimit": "2Gi"}})
            mounts.append({"name": "hf-cache", "mountPath": HF_CACHE_DIR})
            env.append({"name": "HF_HOME", "value": HF_CACHE_DIR})
            env += [e for e in model_storage_env(spec) if e["name"] == "HF_TOKEN"]
    return volumes, mounts, env


def _deployment(pool: PoolRef, spec: SMetricPoolSpec) -> Manifest:
    meta = metadata(pool, pool.epp_name, EPP)
    config_hash = hashlib.sha256(policy_config_text(spec).encode()).hexdigest()[:20]
    # Upstream service names (GIE cmd/epp/runner/health.go): liveness never depends on the pool,
    # so engines that are loading or down never restart the picker; readiness = discovery synced.
    live = {"grpc": {"port": HEALTH_PORT, "service": "liveness"}}
    ready = {"grpc": {"port": HEALTH_PORT, "service": "readiness"}}
    volumes, mounts, extra_env = _volumes(pool, spec)
    container: dict[str, Any] = {
        "name": "epp",
        "image": spec.router.image,
        "command": ["smetric-epp"],
        "args": picker_args(pool, spec),
        "env": [
            {"name": "PYTHONHASHSEED", "value": spec.router.hash_seed},
            {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},  # Lease holder
            *extra_env,
            *spec.router.pod.env,
        ],
        "ports": [
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "grpc-health", "containerPort": HEALTH_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
            *(
                [{"name": "snapshot", "containerPort": SNAPSHOT_PORT, "protocol": "TCP"}]
                if spec.picker_replicas >= 2
                else []
            ),
        ],
        # Start-up may load a tokenizer (hub download): up to 5 minutes before liveness applies.
        "startupProbe": {**live, "periodSeconds": 5, "failureThreshold": 60},
        "readinessProbe": {**ready, "periodSeconds": 2, "failureThreshold": 3},
        "livenessProbe": {**live, "periodSeconds": 10, "failureThreshold": 6},
        "volumeMounts": [*mounts, *spec.router.pod.volume_mounts],
        "securityContext": {
            **container_security(),
            "runAsNonRoot": True,
            "runAsUser": PICKER_UID,
            "readOnlyRootFilesystem": True,
        },
    }
    resources = {**spec.router.resources, **spec.router.pod.resources}
    if resources:
        container["resources"] = resources
    template_meta: dict[str, Any] = {
        "labels": dict(meta["labels"]),
        "annotations": {CONFIG_HASH_ANNOTATION: config_hash, **pod_annotations(spec.router.pod)},
    }
    pod: dict[str, Any] = {
        "serviceAccountName": pool.epp_name,
        # As upstream's chart: long enough for open streams to finish on a rollout.
        "terminationGracePeriodSeconds": 130,
        "securityContext": {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}},
        "containers": [container],
        "volumes": [*volumes, *spec.router.pod.volumes],
        "tolerations": list(spec.router.pod.tolerations),
    }
    apply_pod_overrides(pod, spec.router.pod)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": spec.picker_replicas,
            "strategy": _strategy(spec),
            "selector": {"matchLabels": selector_labels(pool, EPP)},
            # A policy change rolls the picker (the config is read at start-up).
            "template": {"metadata": template_meta, "spec": pod},
        },
    }


def _strategy(spec: SMetricPoolSpec) -> dict[str, Any]:
    """Several active-active replicas: a rolling update that never has fewer ready pickers than
    replicas (the gateway keeps reaching one while a pod is replaced). One replica, or leader
    election: Recreate, as upstream's chart (GIE v1.5.0 config/charts/epplib/templates/_deployment.yaml
    12-19) -- one active picker at a time, and with leader election a rolling update would stall:
    a new pod stands by (the old leader holds the Lease), is never Ready, and maxUnavailable 0 never
    lets the old leader go."""
    if spec.picker_replicas < 2 or spec.router.leader_election:
        return {"type": "Recreate"}
    return {"type": "RollingUpdate", "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1}}


def _disruption_budget(pool: PoolRef, spec: SMetricPoolSpec) -> list[Manifest]:
    """maxUnavailable 1 with 2+ replicas: a node drain or eviction keeps a picker serving."""
    if not spec.protection.pod_disruption_budget or spec.picker_replicas < 2:
        return []
    return [
        {
            "apiVersion": "policy/v1",
            "kind": "PodDisruptionBudget",
            "metadata": metadata(pool, pool.epp_name, EPP),
            "spec": {"maxUnavailable": 1, "selector": {"matchLabels": selector_labels(pool, EPP)}},
        }
    ]


def _service(pool: PoolRef, spec: SMetricPoolSpec) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": metadata(pool, pool.epp_name, EPP),
        "spec": {
            "selector": selector_labels(pool, EPP),
            "ports": [
                {
                    "name": "grpc-ext-proc",
                    "port": GRPC_PORT,
                    "targetPort": GRPC_PORT,
                    "protocol": "TCP",
                    # TLS: HTTP/2 over TLS (upstream chart: http2); plaintext: h2c.
                    "appProtocol": "http2" if spec.router.secure_serving else "kubernetes.io/h2c",
                },
                {"name": "http-metrics", "port": METRICS_PORT, "targetPort": METRICS_PORT, "protocol": "TCP"},
            ],
        },
    }


def _peers_service(pool: PoolRef, spec: SMetricPoolSpec) -> list[Manifest]:
    """2+ replicas: a headless Service whose name resolves to every ready replica (``--peers``): a
    starting replica restores a peer's snapshot, and each pushes the Responses follow-up entries it
    learns to all of them (docs/picker.md, "Responses follow-ups")."""
    if spec.picker_replicas < 2:
        return []
    return [
        {
            "apiVersion": "v1",
            "kind": "Service",
            "metadata": metadata(pool, peers_service(pool), EPP),
            "spec": {
                "clusterIP": "None",
                "selector": selector_labels(pool, EPP),
                "ports": [{"name": "snapshot", "port": SNAPSHOT_PORT, "targetPort": SNAPSHOT_PORT}],
            },
        }
    ]


def picker(pool: PoolRef, spec: SMetricPoolSpec) -> list[Manifest]:
    return [
        _config_map(pool, spec),
        *_rbac(pool, spec),
        _deployment(pool, spec),
        *_peers_service(pool, spec),
        _service(pool, spec),
        *_disruption_budget(pool, spec),
    ]
