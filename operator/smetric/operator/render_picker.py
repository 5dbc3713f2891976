"""The endpoint picker: policy ConfigMap, RBAC, Deployment and its h2c Service."""

from __future__ import annotations

import hashlib
from typing import Any

import yaml

from smetric.epp.flags import render_args
from smetric.operator.meta import EPP, Manifest, PoolRef, metadata, selector_labels
from smetric.operator.render_engine import KV_EVENTS_PORT
from smetric.operator.spec import SMetricPoolSpec

GRPC_PORT = 9002
HEALTH_PORT = 9003
METRICS_PORT = 9090
CONFIG_DIR = "/etc/smetric"
CONFIG_FILE = f"{CONFIG_DIR}/config.yaml"
CONFIG_HASH_ANNOTATION = "smetric.io/config-hash"


def policy_config(spec: SMetricPoolSpec) -> dict[str, Any]:
    """The picker's ``config.yaml`` (``smetric.epp.config``): policy name + parameters (camelCase,
    parsed by ``smetric.policy.params_from_mapping``) and PD routing for disaggregated pools."""
    params = spec.router.parameters
    parameters: dict[str, Any] = {
        "slack": params.slack,
        "hitRatio": params.hit_ratio,
        "mode": spec.topology.mode,
        "ttftSloBaseS": params.ttft_slo_base_s,
        "ttftSloPerKTokS": params.ttft_slo_per_k_tok_s,
        "tpotSloS": params.tpot_slo_s,
        "blockTokens": spec.model.block_size,
    }
    if params.cost_model is not None:
        parameters["costModel"] = {"cLinS": params.cost_model.c_lin_s, "cAttS": params.cost_model.c_att_s}
    if params.global_fetch_s_per_token is not None and spec.global_kv.enabled:
        parameters["globalFetchSPerToken"] = params.global_fetch_s_per_token
    return {
        "policy": {"name": spec.router.policy, "parameters": parameters},
        "pdDisaggregation": {"enabled": spec.topology.mode == "disaggregated"},
    }


def policy_config_text(spec: SMetricPoolSpec) -> str:
    return yaml.safe_dump(policy_config(spec), sort_keys=False)


def picker_args(pool: PoolRef, spec: SMetricPoolSpec) -> list[str]:
    values: dict[str, object] = {
        "grpc-port": GRPC_PORT,
        "grpc-health-port": HEALTH_PORT,
        "metrics-port": METRICS_PORT,
        "config": CONFIG_FILE,
        "pool-name": pool.name,
        "pool-namespace": pool.namespace,
        "prefix-index": spec.router.prefix_index,
        "kv-events-port": KV_EVENTS_PORT,
        "hash-seed": spec.router.hash_seed,
        "block-size": spec.model.block_size,
    }
    if spec.router.prefix_index == "precise":
        values["tokenizer"] = spec.model.name
    return render_args(values)


def _config_map(pool: PoolRef, spec: SMetricPoolSpec) -> Manifest:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": metadata(pool, pool.child("epp-config"), EPP),
        "data": {"config.yaml": policy_config_text(spec)},
    }


def _rbac(pool: PoolRef) -> list[Manifest]:
    name = pool.epp_name
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


def _deployment(pool: PoolRef, spec: SMetricPoolSpec) -> Manifest:
    meta = metadata(pool, pool.epp_name, EPP)
    config_hash = hashlib.sha256(policy_config_text(spec).encode()).hexdigest()[:20]
    grpc_probe = {"grpc": {"port": HEALTH_PORT, "service": ""}}
    container: dict[str, Any] = {
        "name": "epp",
        "image": spec.router.image,
        "command": ["smetric-epp"],
        "args": picker_args(pool, spec),
        "env": [{"name": "PYTHONHASHSEED", "value": spec.router.hash_seed}],
        "ports": [
            {"name": "grpc", "containerPort": GRPC_PORT, "protocol": "TCP"},
            {"name": "grpc-health", "containerPort": HEALTH_PORT, "protocol": "TCP"},
            {"name": "metrics", "containerPort": METRICS_PORT, "protocol": "TCP"},
        ],
        "readinessProbe": {**grpc_probe, "periodSeconds": 2, "failureThreshold": 3},
        "livenessProbe": {**grpc_probe, "periodSeconds": 10, "failureThreshold": 6, "initialDelaySeconds": 5},
        "volumeMounts": [{"name": "config", "mountPath": CONFIG_DIR, "readOnly": True}],
    }
    if spec.router.resources:
        container["resources"] = dict(spec.router.resources)
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": meta,
        "spec": {
            "replicas": spec.router.replicas,
            "selector": {"matchLabels": selector_labels(pool, EPP)},
            "template": {
                # A policy change rolls the picker (the config is read at start-up).
                "metadata": {
                    "labels": dict(meta["labels"]),
                    "annotations": {CONFIG_HASH_ANNOTATION: config_hash},
                },
                "spec": {
                    "serviceAccountName": pool.epp_name,
                    "containers": [container],
                    "volumes": [{"name": "config", "configMap": {"name": pool.child("epp-config")}}],
                },
            },
        },
    }


def _service(pool: PoolRef) -> Manifest:
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
                    "appProtocol": "kubernetes.io/h2c",
                },
                {"name": "http-metrics", "port": METRICS_PORT, "targetPort": METRICS_PORT, "protocol": "TCP"},
            ],
        },
    }


def picker(pool: PoolRef, spec: SMetricPoolSpec) -> list[Manifest]:
    return [_config_map(pool, spec), *_rbac(pool), _deployment(pool, spec), _service(pool)]
