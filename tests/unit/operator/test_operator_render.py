"""Renderer: every branch, every object valid (kubernetes-validate strict; jsonschema for CRD kinds)."""

from __future__ import annotations

import json
import shlex

import pytest
import yaml

from smetric.core.names import ROLE_BOTH, ROLE_DECODE, ROLE_LABEL, ROLE_PREFILL
from smetric.operator.meta import SPEC_HASH_ANNOTATION, spec_hash
from smetric.operator.render import render_resource
from smetric.operator.render_kv import lmcache_config_text
from smetric.operator.spec import parse_spec
from tests.support.operator_render import (
    POOL,
    VARIANTS,
    by_name,
    container,
    env,
    flag,
    render,
    spec,
    validate,
)


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_every_rendered_object_is_valid(variant: str) -> None:
    children = render(VARIANTS[variant])
    assert len({(c["kind"], c["metadata"]["name"]) for c in children}) == len(children)
    for child in children:
        validate(child)
        meta = child["metadata"]
        assert meta["namespace"] == "ns"
        assert meta["ownerReferences"] == [
            {
                "apiVersion": "smetric.io/v1alpha1",
                "kind": "SMetricPool",
                "name": "p",
                "uid": POOL.uid,
                "controller": True,
                "blockOwnerDeletion": True,
            }
        ]
        assert meta["labels"]["app.kubernetes.io/managed-by"] == "smetric-operator"
        assert meta["annotations"][SPEC_HASH_ANNOTATION] == spec_hash(child)


def test_colocated_engine_deployment() -> None:
    children = render(spec())
    kinds = sorted(c["kind"] for c in children)
    assert kinds == sorted(
        [
            "ConfigMap",
            "ServiceAccount",
            "Role",
            "RoleBinding",
            "Deployment",
            "Service",
            "Service",  # the picker replicas' headless peers Service
            "Deployment",
            "PodDisruptionBudget",  # 4 replicas: maxUnavailable 1
            "PodDisruptionBudget",  # the picker's 2 default replicas
            "NetworkPolicy",
            "NetworkPolicy",
            "InferencePool",
        ]
    )
    dep = by_name(children, "Deployment", "p-prefill-decode")
    assert dep["spec"]["replicas"] == 4
    assert dep["spec"]["template"]["metadata"]["labels"][ROLE_LABEL] == ROLE_BOTH
    pod = dep["spec"]["template"]["spec"]
    vllm = container(dep)
    assert vllm["command"] == ["vllm", "serve"]
    args = vllm["args"]
    assert args[0] == "Qwen/Qwen3-Coder-30B-A3B-Instruct" and flag(args, "--port") == "8000"
    assert flag(args, "--block-size") == "16" and "--kv-transfer-config" not in args
    events = json.loads(flag(args, "--kv-events-config"))
    assert events == {
        "enable_kv_cache_events": True,
        "publisher": "zmq",
        "endpoint": "tcp://*:5557",
        "topic": "kv@$(POD_IP):8000@Qwen/Qwen3-Coder-30B-A3B-Instruct",
    }
    names = [e["name"] for e in vllm["env"]]
    assert names.index("POD_IP") == 0  # declared before any $(POD_IP) reference
    assert env(vllm)["PYTHONHASHSEED"] == "0"
    for probe in ("startupProbe", "readinessProbe", "livenessProbe"):
        assert vllm[probe]["httpGet"] == {"path": "/health", "port": 8000}
    assert {"name": "dshm", "emptyDir": {"medium": "Memory", "sizeLimit": "16Gi"}} in pod["volumes"]
    assert vllm["resources"]["limits"] == {"nvidia.com/gpu": 1}
    assert {"key": "nvidia.com/gpu", "operator": "Exists", "effect": "NoSchedule"} in pod["tolerations"]
    term = pod["affinity"]["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"][
        "nodeSelectorTerms"
    ][0]
    assert term["matchExpressions"] == [
        {"key": "nvidia.com/gpu.product", "operator": "In", "values": ["NVIDIA-H20", "NVIDIA-H20-3e"]}
    ]
    # securityContext, drain of long streams, memory request for shm + process
    assert vllm["securityContext"] == {"allowPrivilegeEscalation": False, "capabilities": {"drop": ["ALL"]}}
    assert pod["securityContext"] == {"seccompProfile": {"type": "RuntimeDefault"}}
    assert vllm["lifecycle"]["preStop"]["exec"]["command"] == ["/bin/sh", "-c", "sleep 300"]
    assert pod["terminationGracePeriodSeconds"] == 330
    assert vllm["resources"]["requests"]["memory"] == "48Gi"  # engine.hostMemory 32Gi + shm 16Gi
    assert vllm["startupProbe"]["failureThreshold"] * vllm["startupProbe"]["periodSeconds"] == 3600
    assert "initContainers" not in pod
    assert not [c for c in children if c["kind"] == "HTTPRoute"]  # no gateway configured


def test_global_kv_rdma_renders_master_lmcache_and_rdma() -> None:
    children = render(VARIANTS["colocated-global-kv-rdma"])
    master = by_name(children, "Deployment", "p-mooncake-master")
    mc = container(master, "mooncake-master")
    assert mc["command"] == ["mooncake_master"]
    assert "--rpc_port=50051" in mc["args"] and "--eviction_high_watermark_ratio=0.9" in mc["args"]
    assert "--rpc_address=$(POD_IP)" in mc["args"]
    svc = by_name(children, "Service", "p-mooncake-master")
    assert {(p["name"], p["port"]) for p in svc["spec"]["ports"]} == {
        ("rpc", 50051),
        ("http-metadata", 8080),
        ("metrics", 9003),
    }
    vllm = container(by_name(children, "Deployment", "p-prefill-decode"))
    assert vllm["command"][:2] == ["/bin/sh", "-c"]
    assert vllm["args"][:2] == ["vllm", "serve"]
    assert json.loads(flag(vllm["args"], "--kv-transfer-config")) == {
        "kv_connector": "LMCacheConnectorV1",
        "kv_role": "kv_both",
    }
    assert flag(vllm["args"], "--data-parallel-size") == "2"  # 2 GPUs per pod at TP 1
    assert env(vllm)["LMCACHE_CONFIG_FILE"] == "/etc/lmcache/lmcache.yaml"
    assert vllm["resources"]["limits"] == {"nvidia.com/gpu": 2, "rdma/ib": 1}
    assert vllm["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"], "add": ["IPC_LOCK"]},
    }
    route = by_name(children, "HTTPRoute", "p")
    assert route["spec"]["hostnames"] == ["llm.example.com"]
    assert route["spec"]["parentRefs"] == [
        {"group": "gateway.networking.k8s.io", "kind": "Gateway", "name": "gw"}
    ]
    assert route["spec"]["rules"][0]["backendRefs"] == [
        {"group": "inference.networking.k8s.io", "kind": "InferencePool", "name": "p"}
    ]


def test_lmcache_file_is_rendered_by_the_shell_with_the_pod_ip() -> None:
    """Run the container's launcher script in a real shell: the file gets the pod IP, argv is exec'd."""
    import subprocess

    children = render(VARIANTS["colocated-global-kv-rdma"])
    vllm = container(by_name(children, "Deployment", "p-prefill-decode"))
    script = vllm["command"][2].replace("/etc/lmcache", "$CONF_DIR")
    proc = subprocess.run(
        [
            "/bin/sh",
            "-c",
            f"export CONF_DIR=$(mktemp -d); {script}",
            "engine",
            "sh",
            "-c",
            'cat "$CONF_DIR/lmcache.yaml"',
        ],
        env={"POD_IP": "10.1.2.3", "PATH": "/usr/bin:/bin"},
        capture_output=True,
        text=True,
        check=True,
    )
    config = yaml.safe_load(proc.stdout)
    assert config["extra_config"]["local_hostname"] == "10.1.2.3"
    assert config["remote_url"] == "mooncakestore://p-mooncake-master.ns.svc:50051/"
    assert config["extra_config"]["metadata_server"] == "http://p-mooncake-master.ns.svc:8080/metadata"
    assert config["extra_config"]["master_server_address"] == "p-mooncake-master.ns.svc:50051"
    assert config["extra_config"]["protocol"] == "rdma" and config["extra_config"]["device_name"] == "mlx5_0"
    assert config["extra_config"]["global_segment_size"] == 32 * 2**30
    assert config["chunk_size"] == 256 and config["remote_serde"] == "naive" and config["local_cpu"] is False
    # the write path the simulator models, explicit: whole chunks of the prompt, no decode tokens
    assert config["save_decode_cache"] is False and config["save_unfull_chunk"] is False


def test_lmcache_text_without_shell() -> None:
    text = lmcache_config_text(POOL, parse_spec(spec(globalKV={"enabled": True})), pod_ip="10.0.0.9")
    assert yaml.safe_load(text)["extra_config"]["local_hostname"] == "10.0.0.9"


def test_disaggregated_nixl_roles_and_sidecar() -> None:
    children = render(VARIANTS["disaggregated-nixl"])
    prefill = by_name(children, "Deployment", "p-prefill")
    decode = by_name(children, "Deployment", "p-decode")
    assert prefill["spec"]["replicas"] == 2 and decode["spec"]["replicas"] == 3
    assert prefill["spec"]["selector"]["matchLabels"][ROLE_LABEL] == ROLE_PREFILL
    assert decode["spec"]["selector"]["matchLabels"][ROLE_LABEL] == ROLE_DECODE
    for dep in (prefill, decode):
        vllm = container(dep)
        assert json.loads(flag(vllm["args"], "--kv-transfer-config")) == {
            "kv_connector": "NixlConnector",
            "kv_role": "kv_both",
        }
        assert env(vllm)["VLLM_NIXL_SIDE_CHANNEL_HOST"] == "$(POD_IP)"
    assert flag(container(prefill)["args"], "--port") == "8000"
    assert flag(container(decode)["args"], "--port") == "8200"  # behind the sidecar
    assert container(decode)["readinessProbe"]["httpGet"]["port"] == 8200
    sidecar = container(decode, "routing-sidecar")
    assert sidecar["image"] == "ghcr.io/llm-d/llm-d-routing-sidecar:v0.8.0"  # pinned
    assert sidecar["restartPolicy"] == "Always"
    # Plain HTTP (the sidecar's default is TLS) and the current connector flag
    assert sidecar["args"] == [
        "--port=8000",
        "--vllm-port=8200",
        "--kv-connector=nixlv2",
        "--secure-proxy=false",
    ]
    assert "initContainers" not in prefill["spec"]["template"]["spec"]
    assert not [c for c in children if c["metadata"]["name"] == "p-prefill-decode"]
    config = yaml.safe_load(by_name(children, "ConfigMap", "p-epp-config")["data"]["config.yaml"])
    assert config["policy"]["parameters"]["mode"] == "disaggregated"
    assert config["pdDisaggregation"] == {"enabled": True}


def test_disaggregated_mooncake_with_global_kv_uses_multiconnector() -> None:
    children = render(VARIANTS["disaggregated-mooncake-global-kv"])
    roles = {"p-prefill": "kv_producer", "p-decode": "kv_consumer"}
    for name, role in roles.items():
        vllm = container(by_name(children, "Deployment", name))
        transfer = json.loads(flag(vllm["args"], "--kv-transfer-config"))
        assert transfer == {
            "kv_connector": "MultiConnector",
            "kv_role": role,
            "kv_connector_extra_config": {
                "connectors": [
                    {
                        "kv_connector": "MooncakeConnector",
                        "kv_role": role,
                        "kv_connector_extra_config": {"mooncake_protocol": "tcp", "device_name": ""},
                    },
                    {"kv_connector": "LMCacheConnectorV1", "kv_role": "kv_both"},
                ]
            },
        }
        assert "VLLM_NIXL_SIDE_CHANNEL_HOST" not in env(vllm)
    pool = by_name(children, "InferencePool", "p")
    assert pool["spec"]["endpointPickerRef"]["failureMode"] == "FailOpen"


def test_custom_command_cpu_only() -> None:
    children = render(VARIANTS["cpu-emulator"])
    dep = by_name(children, "Deployment", "p-prefill-decode")
    vllm = container(dep)
    assert vllm["command"] == ["smetric", "emulate"] and vllm["args"] == ["--port=8000"]
    assert "nvidia.com/gpu" not in json.dumps(vllm["resources"])
    assert "affinity" not in dep["spec"]["template"]["spec"]


def test_hash_changes_only_for_affected_children() -> None:
    base = {
        (c["kind"], c["metadata"]["name"]): c["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
        for c in render(spec())
    }
    again = {
        (c["kind"], c["metadata"]["name"]): c["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
        for c in render(spec())
    }
    assert base == again  # deterministic
    scaled = spec(topology={"replicas": 5})
    changed = {
        key
        for c in render(scaled)
        for key in [(c["kind"], c["metadata"]["name"])]
        if base[key] != c["metadata"]["annotations"][SPEC_HASH_ANNOTATION]
    }
    assert changed == {("Deployment", "p-prefill-decode")}


def test_render_resource_offline_has_no_owner_and_rejects_other_kinds() -> None:
    doc = {
        "apiVersion": "smetric.io/v1alpha1",
        "kind": "SMetricPool",
        "metadata": {"name": "x"},
        "spec": spec(),
    }
    children = render_resource(doc, "team-a")
    assert all("ownerReferences" not in c["metadata"] for c in children)
    assert {c["metadata"]["namespace"] for c in children} == {"team-a"}
    with pytest.raises(ValueError, match="expected kind SMetricPool"):
        render_resource({"kind": "Deployment"})
    with pytest.raises(ValueError, match=r"metadata\.name"):
        render_resource({"kind": "SMetricPool", "metadata": {}, "spec": spec()})


def test_shell_quoting_survives_model_names() -> None:
    """Engine argv never passes through the shell: odd characters stay one argument."""
    raw = spec(model={"name": "org/model with space"}, globalKV={"enabled": True})
    vllm = container(by_name(render(raw), "Deployment", "p-prefill-decode"))
    assert vllm["args"][2] == "org/model with space"
    assert "org/model" not in vllm["command"][2]
    assert shlex.split(shlex.join(vllm["args"]))[2] == "org/model with space"
