"""The picker manifests and the SMetricPool spec, asserted value by value (docs/mutation.md).

Every expected value is written out here rather than derived from the renderer's own constants,
so a change to a rendered field, a default, a bound or a validation rule fails a test.
"""

from __future__ import annotations

import hashlib
from typing import Any

import pytest
import yaml

from smetric.operator.meta import PoolRef
from smetric.operator.render_picker import picker, picker_args, policy_config, policy_config_text
from smetric.operator.spec import InvalidSpecError, SMetricPoolSpec, parse_spec, quantity_bytes

POOL = PoolRef(name="p", namespace="team-a", uid="u-1")
LABELS = {
    "app.kubernetes.io/name": "smetric",
    "app.kubernetes.io/part-of": "smetric",
    "app.kubernetes.io/managed-by": "smetric-operator",
    "smetric.io/pool": "p",
    "app.kubernetes.io/instance": "p",
    "app.kubernetes.io/component": "endpoint-picker",
}
SELECTOR = {"app.kubernetes.io/instance": "p", "app.kubernetes.io/component": "endpoint-picker"}


def raw(**over: Any) -> dict[str, Any]:
    out: dict[str, Any] = {"model": {"name": "org/m"}, "topology": {"replicas": 1}}
    out.update(over)
    return out


APPROX = {"prefixIndex": "approximate", "replicas": 1}


def render(**over: Any) -> dict[str, dict[str, Any]]:
    return {m["kind"]: m for m in picker(POOL, parse_spec(raw(**over)))}


def pod_of(children: dict[str, dict[str, Any]]) -> dict[str, Any]:
    pod: dict[str, Any] = children["Deployment"]["spec"]["template"]["spec"]
    return pod


def epp(children: dict[str, dict[str, Any]]) -> dict[str, Any]:
    (c,) = pod_of(children)["containers"]
    assert isinstance(c, dict)
    return c


# ---- the picker's manifests -------------------------------------------------------------------


def test_picker_renders_its_objects_in_the_namespace_of_the_pool() -> None:
    out = picker(POOL, parse_spec(raw()))
    assert [(m["kind"], m["metadata"]["name"]) for m in out] == [
        ("ConfigMap", "p-epp-config"),
        ("ServiceAccount", "p-epp"),
        ("Role", "p-epp"),
        ("RoleBinding", "p-epp"),
        ("Deployment", "p-epp"),
        ("Service", "p-epp"),
        ("PodDisruptionBudget", "p-epp"),
    ]
    for m in out:
        assert m["metadata"]["namespace"] == "team-a"
        assert m["metadata"]["labels"] == LABELS


def test_two_pickers_by_default_roll_one_at_a_time_under_a_disruption_budget() -> None:
    c = render()
    assert c["Deployment"]["spec"]["replicas"] == 2
    assert c["Deployment"]["spec"]["strategy"] == {
        "type": "RollingUpdate",
        "rollingUpdate": {"maxUnavailable": 0, "maxSurge": 1},
    }
    assert c["PodDisruptionBudget"]["apiVersion"] == "policy/v1"
    assert c["PodDisruptionBudget"]["spec"] == {"maxUnavailable": 1, "selector": {"matchLabels": SELECTOR}}
    assert "PodDisruptionBudget" not in render(policies={"podDisruptionBudget": False})
    one = render(router={"replicas": 1})
    assert "PodDisruptionBudget" not in one
    # one active picker at a time: two ledgers never see halves of the traffic during a rollout
    assert one["Deployment"]["spec"]["strategy"] == {"type": "Recreate"}
    assert render(router={"replicas": 3})["Deployment"]["spec"]["replicas"] == 3


def test_leader_election_renders_its_flag_and_lease_rights() -> None:
    off = render()
    assert not any("leader" in a for a in epp(off)["args"])
    assert len(off["Role"]["rules"]) == 2
    on = render(router={"leaderElection": True, "prefixIndex": "approximate"})
    assert epp(on)["args"][-1] == "--ha-enable-leader-election=true"
    assert on["Role"]["rules"][-1] == {
        "apiGroups": ["coordination.k8s.io"],
        "resources": ["leases"],
        "verbs": ["get", "create", "update", "patch"],
    }
    assert on["Deployment"]["spec"]["replicas"] == 2  # a standby by default


def test_prefix_index_and_replica_defaults_follow_the_engine() -> None:
    s = parse_spec(raw())
    assert (s.prefix_index, s.picker_replicas) == ("precise", 2)
    custom = parse_spec(raw(model={"name": "org/m", "command": ["my-engine"]}))
    assert (custom.prefix_index, custom.picker_replicas) == ("approximate", 1)
    assert parse_spec(raw(router={"prefixIndex": "precise", "replicas": 4})).picker_replicas == 4
    assert parse_spec(raw(router={"prefixIndex": "approximate"})).picker_replicas == 1
    with pytest.raises(InvalidSpecError, match=r"router\.replicas=2 with the approximate prefix index"):
        parse_spec(raw(router={"prefixIndex": "approximate", "replicas": 2}))
    with pytest.raises(InvalidSpecError, match=r"router\.replicas=3 with the approximate prefix index"):
        parse_spec(raw(model={"name": "org/m", "command": ["my-engine"]}, router={"replicas": 3}))


def test_rbac_binds_the_pickers_own_service_account_in_the_pool_namespace() -> None:
    c = render()
    assert c["ServiceAccount"]["apiVersion"] == "v1"
    assert c["Role"]["apiVersion"] == "rbac.authorization.k8s.io/v1"
    assert c["Role"]["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": ["inference.networking.k8s.io"],
            "resources": ["inferencepools"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    binding = c["RoleBinding"]
    assert binding["apiVersion"] == "rbac.authorization.k8s.io/v1"
    assert binding["roleRef"] == {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "p-epp"}
    # a subject without its namespace would bind a service account nobody runs as
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "p-epp", "namespace": "team-a"}]


def test_config_map_holds_the_policy_config() -> None:
    cm = render()["ConfigMap"]
    assert cm["apiVersion"] == "v1"
    assert set(cm["data"]) == {"config.yaml"}
    assert yaml.safe_load(cm["data"]["config.yaml"]) == {
        "policy": {
            "name": "lmetric",
            "parameters": {
                "mode": "colocated",
                "ttftSloBaseS": 1.0,
                "ttftSloPerKTokS": 0.0625,
                "tpotSloS": 0.02,
                "blockTokens": 16,
            },
        },
        "pdDisaggregation": {"enabled": False},
    }
    assert cm["data"]["config.yaml"].startswith("policy:\n  name: lmetric\n")  # key order kept


def test_policy_config_cost_model_global_fetch_and_disaggregation() -> None:
    params = {"slack": 1.5, "costModel": {"cLinS": 1e-4, "cAttS": 2e-8}, "globalFetchSPerToken": 3e-6}
    without_tier = policy_config(parse_spec(raw(router={"policy": "smetric", "parameters": params})))
    assert without_tier["policy"]["parameters"]["costModel"] == {"cLinS": 1e-4, "cAttS": 2e-8}
    assert without_tier["policy"]["parameters"]["slack"] == 1.5
    assert "globalFetchSPerToken" not in without_tier["policy"]["parameters"]  # no tier, no credit
    with_tier = policy_config(
        parse_spec(raw(router={"policy": "smetric", "parameters": params}, globalKV={"enabled": True}))
    )
    assert with_tier["policy"]["parameters"]["globalFetchSPerToken"] == 3e-6
    disagg = parse_spec(
        raw(topology={"mode": "disaggregated", "prefill": {"replicas": 1}, "decode": {"replicas": 1}})
    )
    cfg = policy_config(disagg)
    assert cfg["pdDisaggregation"] == {"enabled": True}
    assert cfg["policy"]["parameters"]["mode"] == "disaggregated"
    assert policy_config_text(disagg) == yaml.safe_dump(cfg, sort_keys=False)


def _fetch(model: dict[str, Any], **over: Any) -> float | None:
    cfg = policy_config(
        parse_spec(raw(model=model, globalKV={"enabled": True}, gpus={"countPerPod": 0}, **over))
    )
    value: float | None = cfg["policy"]["parameters"].get("globalFetchSPerToken")
    return value


def test_global_fetch_rate_from_the_models_preset() -> None:
    coder = "Qwen/Qwen3-Coder-30B-A3B-Instruct"  # preset qwen3-30b-h20: one GPU, bf16 KV
    assert _fetch({"name": coder}) == pytest.approx(1.31072e-05)
    assert _fetch({"name": coder, "kvCacheDtype": "fp8_e4m3"}) == pytest.approx(6.5536e-06)  # half the bytes
    assert _fetch({"name": coder, "tensorParallelSize": 2}) == pytest.approx(6.5536e-06)  # KV split over 2
    big = "Qwen/Qwen3-235B-A22B-Instruct-2507-FP8"  # preset qwen3-235b-4xh20: four GPUs
    assert _fetch({"name": big, "tensorParallelSize": 4}) == pytest.approx(6.4170666666666665e-06)
    assert _fetch({"name": big, "tensorParallelSize": 8}) == pytest.approx(3.2085333333333333e-06)
    assert _fetch({"name": big, "tensorParallelSize": 1}) is None  # a parallelism the preset cannot take
    assert _fetch({"name": "org/unknown"}) is None  # no preset: local hits only
    given = {"parameters": {"globalFetchSPerToken": 2e-6}}
    assert _fetch({"name": coder}, router=given) == 2e-6  # the spec's own value wins


def test_deployment_defaults() -> None:
    c = render(router=APPROX)
    dep = c["Deployment"]
    assert dep["apiVersion"] == "apps/v1"
    assert dep["spec"]["replicas"] == 1
    assert dep["spec"]["strategy"] == {"type": "Recreate"}
    assert dep["spec"]["selector"] == {"matchLabels": SELECTOR}
    template_meta = dep["spec"]["template"]["metadata"]
    assert template_meta["labels"] == LABELS
    text = c["ConfigMap"]["data"]["config.yaml"]
    assert template_meta["annotations"] == {
        "smetric.io/config-hash": hashlib.sha256(text.encode()).hexdigest()[:20]
    }
    pod = pod_of(c)
    assert pod["serviceAccountName"] == "p-epp"
    assert pod["terminationGracePeriodSeconds"] == 130
    assert pod["securityContext"] == {"runAsNonRoot": True, "seccompProfile": {"type": "RuntimeDefault"}}
    assert pod["volumes"] == [
        {"name": "config", "configMap": {"name": "p-epp-config"}},
        {"name": "tmp", "emptyDir": {"sizeLimit": "1Gi"}},
        {"name": "state", "emptyDir": {"sizeLimit": "1Gi"}},  # outlives a container restart
    ]
    assert pod.get("tolerations", []) == []


def test_picker_container_defaults() -> None:
    e = epp(render(router=APPROX))
    assert e["name"] == "epp"
    assert e["image"] == "ghcr.io/smetric/smetric-epp:0.1.0"
    assert e["command"] == ["smetric-epp"]
    assert e["args"] == [
        "--grpc-port=9002",
        "--grpc-health-port=9003",
        "--metrics-port=9090",
        "--config=/etc/smetric/config.yaml",
        "--pool-name=p",
        "--pool-namespace=team-a",
        "--prefix-index=approximate",
        "--kv-events-port=5557",
        "--hash-seed=0",
        "--block-size=16",
        "--secure-serving=true",
        "--metrics-endpoint-auth=false",
        "--state-file=/var/lib/smetric/prefix-index.json",
    ]  # no --decision-log: off by default; no --cert-path without a Secret; no tokenizer
    assert e["env"] == [
        {"name": "PYTHONHASHSEED", "value": "0"},
        {"name": "NAMESPACE", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
        {"name": "POD_NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
    ]
    assert e["ports"] == [
        {"name": "grpc", "containerPort": 9002, "protocol": "TCP"},
        {"name": "grpc-health", "containerPort": 9003, "protocol": "TCP"},
        {"name": "metrics", "containerPort": 9090, "protocol": "TCP"},
    ]
    live = {"port": 9003, "service": "liveness"}
    assert e["startupProbe"] == {"grpc": live, "periodSeconds": 5, "failureThreshold": 60}
    assert e["readinessProbe"] == {
        "grpc": {"port": 9003, "service": "readiness"},
        "periodSeconds": 2,
        "failureThreshold": 3,
    }
    assert e["livenessProbe"] == {"grpc": live, "periodSeconds": 10, "failureThreshold": 6}
    assert e["volumeMounts"] == [
        {"name": "config", "mountPath": "/etc/smetric", "readOnly": True},
        {"name": "tmp", "mountPath": "/tmp"},
        {"name": "state", "mountPath": "/var/lib/smetric"},
    ]
    assert e["securityContext"] == {
        "allowPrivilegeEscalation": False,
        "capabilities": {"drop": ["ALL"]},
        "runAsNonRoot": True,
        "runAsUser": 65532,
        "readOnlyRootFilesystem": True,
    }
    assert e["resources"] == {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"memory": "8Gi"}}


def test_service_tls_and_plaintext() -> None:
    svc = render()["Service"]
    assert svc["apiVersion"] == "v1"
    assert svc["spec"] == {
        "selector": SELECTOR,
        "ports": [
            {
                "name": "grpc-ext-proc",
                "port": 9002,
                "targetPort": 9002,
                "protocol": "TCP",
                "appProtocol": "http2",
            },
            {"name": "http-metrics", "port": 9090, "targetPort": 9090, "protocol": "TCP"},
        ],
    }
    h2c = render(router={"secureServing": False})["Service"]["spec"]["ports"][0]
    assert h2c["appProtocol"] == "kubernetes.io/h2c"


def test_decision_log_and_cert_secret_flags() -> None:
    c = render(router={"decisionLog": True, "certSecretName": "epp-tls", **APPROX})
    e = epp(c)
    assert e["args"][-2:] == ["--cert-path=/etc/smetric/tls", "--decision-log=true"]
    assert {"name": "tls", "mountPath": "/etc/smetric/tls", "readOnly": True} in e["volumeMounts"]
    assert {"name": "tls", "secret": {"secretName": "epp-tls"}} in pod_of(c)["volumes"]
    plain = render(router={"secureServing": False, "certSecretName": "epp-tls", **APPROX})
    assert "--secure-serving=false" in epp(plain)["args"]
    assert not any(a.startswith("--cert-path") for a in epp(plain)["args"])
    assert [v["name"] for v in pod_of(plain)["volumes"]] == ["config", "tmp", "state"]


def test_precise_index_reads_the_tokenizer_from_the_read_only_weights_volume() -> None:
    storage = {"claimName": "weights", "readOnly": False}  # the picker mounts it read-only anyway
    c = render(
        model={"name": "org/m", "storage": storage, "hfTokenSecret": {"name": "hf"}},
        router={"prefixIndex": "precise"},
    )
    e = epp(c)
    assert "--tokenizer=org/m" in e["args"]
    assert pod_of(c)["volumes"][3:] == [
        {"name": "model", "persistentVolumeClaim": {"claimName": "weights", "readOnly": True}}
    ]
    assert e["volumeMounts"][3:] == [{"name": "model", "mountPath": "/models", "readOnly": True}]
    assert e["env"][3:] == [
        {"name": "HF_HOME", "value": "/models"},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "HF_TOKEN"}}},
        {"name": "HF_HUB_OFFLINE", "value": "1"},  # once, and offline: the mount is read-only
    ]
    read_only = epp(render(model={"name": "org/m", "storage": {"claimName": "weights"}}))
    assert read_only["env"][3:] == [
        {"name": "HF_HOME", "value": "/models"},
        {"name": "HF_HUB_OFFLINE", "value": "1"},  # the engines' copy replaced, not repeated
    ]
    plain_dir = render(
        model={"name": "/models/m", "storage": {"claimName": "weights", "hfCache": False}},
        router={"prefixIndex": "precise"},
    )
    assert epp(plain_dir)["env"][3:] == []  # a plain directory: model.name is the path


def test_precise_index_without_a_volume_downloads_into_a_writable_cache() -> None:
    c = render(
        model={"name": "org/m", "hfTokenSecret": {"name": "hf", "key": "tok"}},
        router={"prefixIndex": "precise"},
    )
    e = epp(c)
    assert pod_of(c)["volumes"][3:] == [{"name": "hf-cache", "emptyDir": {"sizeLimit": "2Gi"}}]
    assert e["volumeMounts"][3:] == [{"name": "hf-cache", "mountPath": "/var/cache/huggingface"}]
    assert e["env"][3:] == [
        {"name": "HF_HOME", "value": "/var/cache/huggingface"},
        {"name": "HF_TOKEN", "valueFrom": {"secretKeyRef": {"name": "hf", "key": "tok"}}},
    ]


def test_approximate_index_mounts_no_model() -> None:
    c = render(model={"name": "org/m", "storage": {"claimName": "weights"}}, router=APPROX)
    assert [v["name"] for v in pod_of(c)["volumes"]] == ["config", "tmp", "state"]
    assert epp(c)["env"][3:] == []


def test_pod_overrides_are_appended_and_merged() -> None:
    pod_over = {
        "env": [{"name": "X", "value": "1"}],
        "volumes": [{"name": "extra", "emptyDir": {}}],
        "volumeMounts": [{"name": "extra", "mountPath": "/extra"}],
        "tolerations": [{"key": "k", "operator": "Exists"}],
        "annotations": {"a": "b"},
        "resources": {"limits": {"memory": "16Gi"}},
    }
    c = render(router={"pod": pod_over, "resources": {"requests": {"cpu": "1"}}})
    e = epp(c)
    assert e["env"][-1] == {"name": "X", "value": "1"}
    assert e["volumeMounts"][-1] == {"name": "extra", "mountPath": "/extra"}
    assert pod_of(c)["volumes"][-1] == {"name": "extra", "emptyDir": {}}
    assert pod_of(c)["tolerations"] == [{"key": "k", "operator": "Exists"}]
    assert e["resources"] == {"requests": {"cpu": "1"}, "limits": {"memory": "16Gi"}}
    assert c["Deployment"]["spec"]["template"]["metadata"]["annotations"]["a"] == "b"
    placed = pod_of(
        render(
            router={
                "pod": {
                    "nodeSelector": {"pool": "cpu"},
                    "affinity": {"podAntiAffinity": {"x": 1}},
                    "imagePullSecrets": [{"name": "regcred"}],
                    "priorityClassName": "high",
                }
            }
        )
    )
    assert placed["nodeSelector"] == {"pool": "cpu"}
    assert placed["affinity"] == {"podAntiAffinity": {"x": 1}}
    assert placed["imagePullSecrets"] == [{"name": "regcred"}]
    assert placed["priorityClassName"] == "high"
    assert "tolerations" not in placed  # none given: no empty list rendered
    bare = epp(render(router={"resources": {}}))
    assert epp(render(router={"resources": {}, "pod": {"resources": {"limits": {"cpu": "1"}}}}))[
        "resources"
    ] == {"limits": {"cpu": "1"}}
    assert "resources" not in bare


def test_config_hash_follows_the_policy_config() -> None:
    def hash_of(children: dict[str, dict[str, Any]]) -> str:
        h: str = children["Deployment"]["spec"]["template"]["metadata"]["annotations"][
            "smetric.io/config-hash"
        ]
        return h

    assert hash_of(render()) != hash_of(render(router={"parameters": {"tpotSloS": 0.05}}))
    assert hash_of(render()) == hash_of(render(router={"replicas": 3}))


def test_picker_args_order_is_stable() -> None:
    args = picker_args(POOL, parse_spec(raw(router={"hashSeed": "7"})))
    assert args[6] == "--prefix-index=precise" and args[8] == "--hash-seed=7"
    assert args[-1] == "--tokenizer=org/m"


# ---- the spec: the operator's trust boundary --------------------------------------------------


def parse(**over: Any) -> SMetricPoolSpec:
    return parse_spec(raw(**over))


def rejects(fragment: str, **over: Any) -> None:
    with pytest.raises(InvalidSpecError) as err:
        parse(**over)
    assert fragment in str(err.value)


@pytest.mark.parametrize(
    "over, location",
    [
        ({"bogus": 1}, "bogus: Extra inputs are not permitted"),
        ({"model": {"name": "m", "bogus": 1}}, "model.bogus"),
        ({"model": {"name": "m", "storage": {"claimName": "c", "bogus": 1}}}, "model.storage.bogus"),
        ({"model": {"name": "m", "hfTokenSecret": {"name": "s", "bogus": 1}}}, "model.hfTokenSecret.bogus"),
        ({"router": {"bogus": 1}}, "router.bogus"),
        ({"router": {"pod": {"bogus": 1}}}, "router.pod.bogus"),
        ({"router": {"parameters": {"costModel": {"cLinS": 1, "cAttS": 0, "x": 1}}}}, "costModel.x"),
        ({"gpus": {"bogus": 1}}, "gpus.bogus"),
        ({"gpus": {"rdma": {"resourceName": "r", "bogus": 1}}}, "gpus.rdma.bogus"),
        ({"globalKV": {"bogus": 1}}, "globalKV.bogus"),
        ({"globalKV": {"master": {"bogus": 1}}}, "globalKV.master.bogus"),
        ({"globalKV": {"lmcache": {"bogus": 1}}}, "globalKV.lmcache.bogus"),
        ({"engine": {"bogus": 1}}, "engine.bogus"),
        ({"observability": {"bogus": 1}}, "observability.bogus"),
        ({"policies": {"bogus": 1}}, "policies.bogus"),
        ({"gateway": {"parentRef": {"name": "g", "bogus": 1}}}, "gateway.parentRef.bogus"),
        ({"gateway": {"parentRef": {"name": "g"}, "bogus": 1}}, "gateway.bogus"),
        ({"topology": {"replicas": 1, "bogus": 1}}, "topology.bogus"),
        ({"topology": {"replicas": 1, "routingSidecar": {"bogus": 1}}}, "topology.routingSidecar.bogus"),
        (
            {
                "topology": {
                    "mode": "disaggregated",
                    "prefill": {"replicas": 1, "bogus": 1},
                    "decode": {"replicas": 1},
                }
            },
            "topology.prefill.bogus",
        ),
    ],
)
def test_unknown_keys_are_refused_at_every_level(over: dict[str, Any], location: str) -> None:
    rejects(location, **over)


def test_spec_is_frozen_and_accepts_field_names() -> None:
    s = parse(model={"name": "m", "block_size": 32})
    assert s.model.block_size == 32  # populate_by_name: the Python name works as well as blockSize
    with pytest.raises(ValueError, match="frozen"):
        s.model.name = "x"
    with pytest.raises(ValueError, match="frozen"):
        s.router = s.router  # the whole spec too, not only its parts
    assert parse(global_kv={"enabled": True}).global_kv.enabled  # top-level Python names too


def test_defaults() -> None:
    s = parse()
    m, t, g, kv, r = s.model, s.topology, s.gpus, s.global_kv, s.router
    assert (m.served_name, m.image, m.command, m.extra_args) == (None, "vllm/vllm-openai:v0.32.0", (), ())
    assert (m.tensor_parallel_size, m.max_model_len, m.block_size, m.kv_cache_dtype) == (1, None, 16, "auto")
    assert (m.gpu_memory_utilization, m.storage, m.hf_token_secret, m.env) == (None, None, None, ())
    assert m.served == "org/m" and parse(model={"name": "a", "servedName": "b"}).model.served == "b"
    assert (t.mode, t.autoscaled, t.prefill, t.decode, t.pd_connector) == (
        "colocated",
        False,
        None,
        None,
        "nixl",
    )
    assert (g.count_per_pod, g.products, g.tolerations, g.rdma) == (
        1,
        ("NVIDIA-H20", "NVIDIA-H20-3e"),
        (),
        None,
    )
    assert (g.shm_size, g.resources) == ("16Gi", {})
    assert (kv.enabled, kv.mooncake_image) == (False, "ghcr.io/smetric/mooncake-master:0.3.13.post1")
    assert (kv.segment_size, kv.local_buffer_size, kv.protocol, kv.device_names) == ("32Gi", "2Gi", "tcp", ())
    master = kv.master
    assert (master.rpc_port, master.metadata_port, master.metrics_port) == (50051, 8080, 9003)
    assert master.eviction_high_watermark_ratio == 0.9
    assert master.resources == {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"memory": "8Gi"}}
    assert (kv.lmcache.chunk_size, kv.lmcache.max_local_cpu_size_gb) == (256, 5.0)
    assert (r.policy, r.prefix_index, r.image, r.replicas) == (
        None,
        None,
        "ghcr.io/smetric/smetric-epp:0.1.0",
        None,
    )
    assert r.resources == {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"memory": "8Gi"}}
    assert (r.failure_mode, r.hash_seed, r.secure_serving, r.cert_secret_name) == (
        "FailClose",
        "0",
        True,
        None,
    )
    assert r.decision_log is False
    p = r.parameters
    assert (p.ttft_slo_base_s, p.ttft_slo_per_k_tok_s, p.tpot_slo_s) == (1.0, 0.0625, 0.02)
    assert (p.cost_model, p.global_fetch_s_per_token, p.policy_owned) == (None, None, {})
    assert (s.engine.host_memory, s.engine.drain_s) == ("32Gi", 300)
    assert (s.observability.pod_monitor, s.observability.service_monitor) == (False, False)
    assert (s.protection.network_policy, s.protection.pod_disruption_budget) == (True, True)
    assert s.policies is None
    assert s.gateway is None
    pod = r.pod
    assert (pod.resources, pod.env, pod.volumes, pod.volume_mounts, pod.node_selector) == ({}, (), (), (), {})
    assert (pod.affinity, pod.tolerations, pod.image_pull_secrets, pod.annotations) == ({}, (), (), {})
    assert pod.priority_class_name is None
    st = parse(model={"name": "m", "storage": {"claimName": "c"}, "hfTokenSecret": {"name": "s"}}).model
    assert st.storage is not None and st.hf_token_secret is not None
    assert (st.storage.mount_path, st.storage.read_only, st.storage.hf_cache) == ("/models", True, True)
    assert st.hf_token_secret.key == "HF_TOKEN"
    role = parse(
        topology={"mode": "disaggregated", "prefill": {"replicas": 1}, "decode": {"replicas": 2}}
    ).topology.prefill
    assert role is not None
    assert (role.autoscaled, role.tensor_parallel_size, role.gpus_per_pod, role.extra_args) == (
        False,
        None,
        None,
        (),
    )
    rdma = parse(gpus={"rdma": {"resourceName": "rdma/ib"}}).gpus.rdma
    assert rdma is not None and rdma.count == 1
    gw = parse(gateway={"parentRef": {"name": "g"}}).gateway
    assert gw is not None
    assert (gw.path, gw.hostnames, gw.match_model_header, gw.provider, gw.parent_ref.namespace) == (
        "/",
        (),
        False,
        "none",
        None,
    )


def test_routing_policy_default_follows_the_global_tier() -> None:
    assert parse().routing_policy == "lmetric"
    assert parse(globalKV={"enabled": True}).routing_policy == "smetric"
    assert parse(router={"policy": "smetric"}).routing_policy == "smetric"


def _set(path: str, value: Any) -> dict[str, Any]:
    """``raw()`` with the dotted camelCase ``path`` set to ``value``."""
    out = raw()
    if path.startswith("topology.prefill."):
        out["topology"] = {"mode": "disaggregated", "prefill": {"replicas": 1}, "decode": {"replicas": 1}}
    if "tensorParallelSize" in path:
        out["gpus"] = {"countPerPod": 0}  # CPU-only: no divisibility rule
    node = out
    *parents, leaf = path.split(".")
    for key in parents:
        node = node.setdefault(key, {})
    node[leaf] = value
    return out


# (path, the last accepted value, the first refused value) at each bound of the spec
BOUNDS: list[tuple[str, Any, Any]] = [
    ("model.tensorParallelSize", 1, 0),
    ("model.tensorParallelSize", 64, 65),
    ("model.maxModelLen", 1, 0),
    ("model.blockSize", 16, 0),
    ("model.blockSize", 1024, 1040),
    ("model.gpuMemoryUtilization", 1.0, 1.01),
    ("model.gpuMemoryUtilization", 0.01, 0.0),
    ("model.name", "m", ""),
    ("topology.replicas", 0, -1),
    ("topology.replicas", 1024, 1025),
    ("topology.prefill.replicas", 0, -1),
    ("topology.prefill.replicas", 1024, 1025),
    ("topology.prefill.gpusPerPod", 0, -1),
    ("topology.prefill.gpusPerPod", 64, 65),
    ("topology.prefill.tensorParallelSize", 1, 0),
    ("topology.prefill.tensorParallelSize", 64, 65),
    ("gpus.countPerPod", 0, -1),
    ("gpus.countPerPod", 64, 65),
    ("globalKV.master.rpcPort", 1, 0),
    ("globalKV.master.rpcPort", 65535, 65536),
    ("globalKV.master.metadataPort", 1, 0),
    ("globalKV.master.metadataPort", 65535, 65536),
    ("globalKV.master.metricsPort", 1, 0),
    ("globalKV.master.metricsPort", 65535, 65536),
    ("globalKV.master.evictionHighWatermarkRatio", 1.0, 1.01),
    ("globalKV.master.evictionHighWatermarkRatio", 0.01, 0.0),
    ("globalKV.lmcache.chunkSize", 16, 15),
    ("globalKV.lmcache.maxLocalCpuSizeGB", 0.0, -0.1),
    ("router.replicas", 0, -1),
    ("router.replicas", 16, 17),  # the default (precise) index
    ("router.hashSeed", "42", "x1"),
    ("router.parameters.ttftSloBaseS", 0.01, 0.0),
    ("router.parameters.ttftSloPerKTokS", 0.0, -0.01),
    ("router.parameters.tpotSloS", 0.001, 0.0),
    ("router.parameters.globalFetchSPerToken", 0.0, -1e-9),
    ("router.parameters.costModel", {"cLinS": 1e-9, "cAttS": 0.0}, {"cLinS": 0.0, "cAttS": 0.0}),
    ("router.parameters.costModel", {"cLinS": 1e-9, "cAttS": 0.0}, {"cLinS": 1e-9, "cAttS": -1e-9}),
    ("topology.routingSidecar.image", "i", ""),
    ("topology.routingSidecar.tag", "t", ""),
    ("engine.drainS", 0, -1),
    ("engine.drainS", 3600, 3601),
    ("model.storage", {"claimName": "c", "mountPath": "/w"}, {"claimName": "c", "mountPath": "w"}),
    ("model.storage", {"claimName": "c"}, {"claimName": ""}),
    ("model.hfTokenSecret", {"name": "s", "key": "k"}, {"name": "s", "key": ""}),
    ("model.hfTokenSecret", {"name": "s"}, {"name": ""}),
    ("gpus.rdma", {"resourceName": "r", "count": 1}, {"resourceName": "r", "count": 0}),
    ("gpus.rdma", {"resourceName": "r"}, {"resourceName": ""}),
    ("gateway", {"parentRef": {"name": "g"}, "path": "/v1"}, {"parentRef": {"name": "g"}, "path": "v1"}),
    ("gateway", {"parentRef": {"name": "g"}}, {"parentRef": {"name": ""}}),
]


@pytest.mark.parametrize("path, ok, bad", BOUNDS)
def test_bounds(path: str, ok: Any, bad: Any) -> None:
    parse_spec(_set(path, ok))
    with pytest.raises(InvalidSpecError) as err:
        parse_spec(_set(path, bad))
    assert path.split(".")[-1] in str(err.value)


def test_block_size_above_its_bound_is_refused_by_the_bound() -> None:
    rejects(
        "model.blockSize: Input should be less than or equal to 1024", model={"name": "m", "blockSize": 1025}
    )


def test_gpus_per_pod_zero_is_a_cpu_only_role_whatever_its_tensor_parallel_size() -> None:
    s = parse_spec(
        _set("topology.prefill.gpusPerPod", 0)
        | {"model": {"name": "m", "tensorParallelSize": 2}, "gpus": {"countPerPod": 2}}
    )
    assert s.topology.prefill is not None and s.topology.prefill.gpus_per_pod == 0
    assert (
        parse(gpus={"countPerPod": 0}, model={"name": "m", "tensorParallelSize": 4}).gpus.count_per_pod == 0
    )


@pytest.mark.parametrize(
    "quantity, expected",
    [
        ("0", 0),
        ("512", 512),
        ("1k", 1000),
        ("2M", 2_000_000),
        ("3G", 3_000_000_000),
        ("1T", 10**12),
        ("1P", 10**15),
        ("1Ki", 1024),
        ("2Mi", 2 * 1024**2),
        ("32Gi", 34_359_738_368),
        ("1Ti", 1024**4),
        ("1Pi", 1024**5),
        ("1.5Gi", 1_610_612_736),
        (" 16Gi ", 16 * 1024**3),
    ],
)
def test_quantity_bytes(quantity: str, expected: int) -> None:
    assert quantity_bytes(quantity) == expected


@pytest.mark.parametrize("bad", ["", "Gi", "1.Gi", "1KiB", "-1Gi", "1 Gi", "1e3"])
def test_quantity_bytes_refuses(bad: str) -> None:
    with pytest.raises(ValueError, match="is not a memory quantity like 32Gi or 500M"):
        quantity_bytes(bad)


@pytest.mark.parametrize(
    "over, fragment",
    [
        ({"gpus": {"shmSize": "1X"}}, "gpus.shmSize: '1X' is not a memory quantity"),
        ({"globalKV": {"segmentSize": "lots"}}, "globalKV.segmentSize"),
        ({"globalKV": {"localBufferSize": "2GB"}}, "globalKV.localBufferSize"),
        ({"engine": {"hostMemory": "32 Gi"}}, "engine.hostMemory"),
        ({"globalKV": {"deviceNames": ["mlx5 0"]}}, "device name 'mlx5 0' must match [A-Za-z0-9_.-]+"),
        ({"globalKV": {"deviceNames": [""]}}, "device name ''"),
        ({"model": {"name": "m", "blockSize": 24}}, "model.blockSize=24 must be a multiple of 16"),
        (
            {"gpus": {"countPerPod": 3}, "model": {"name": "m", "tensorParallelSize": 2}},
            "model.tensorParallelSize=2 must divide gpus.countPerPod=3",
        ),
        (
            {"model": {"name": "m", "tensorParallelSize": 2}},
            "model.tensorParallelSize=2 must divide gpus.countPerPod=1",
        ),
        (
            {
                "gpus": {"countPerPod": 2},
                "topology": {
                    "mode": "disaggregated",
                    "prefill": {"replicas": 1, "tensorParallelSize": 2, "gpusPerPod": 1},
                    "decode": {"replicas": 1},
                },
            },
            "topology.prefill: tensorParallelSize=2 must divide gpusPerPod=1",
        ),
        (
            {
                "topology": {
                    "mode": "disaggregated",
                    "prefill": {"replicas": 1},
                    "decode": {"replicas": 1},
                    "pdConnector": "mooncake",
                    "routingSidecar": {"tag": "v0.8.0"},
                },
            },
            "topology.pdConnector=mooncake needs a routing sidecar",
        ),
        (
            {
                "gpus": {"countPerPod": 4},
                "topology": {"mode": "disaggregated", "decode": {"replicas": 1, "tensorParallelSize": 3}},
            },
            "topology.decode: tensorParallelSize=3 must divide gpusPerPod=4",  # checked without a prefill
        ),
        ({"router": {"policy": "nope"}}, "router.policy='nope' is not one of"),
        ({"router": {"parameters": {"bogus": 1}}}, "router.parameters: unknown key(s) bogus"),
        (
            {"globalKV": {"enabled": True, "protocol": "rdma"}},
            "globalKV.protocol=rdma requires globalKV.deviceNames",
        ),
        ({"topology": {"replicas": None}}, "topology.mode=colocated requires topology.replicas"),
        (
            {"topology": {"replicas": 1, "prefill": {"replicas": 1}}},
            "topology.prefill/decode are only valid with mode=disaggregated",
        ),
        (
            {"topology": {"replicas": 1, "decode": {"replicas": 1}}},
            "topology.prefill/decode are only valid with mode=disaggregated",
        ),
        (
            {"topology": {"mode": "disaggregated", "prefill": {"replicas": 1}}},
            "topology.mode=disaggregated requires topology.prefill.replicas and topology.decode.replicas",
        ),
        (
            {"topology": {"mode": "disaggregated", "decode": {"replicas": 1}}},
            "topology.mode=disaggregated requires topology.prefill.replicas and topology.decode.replicas",
        ),
        (
            {
                "topology": {
                    "mode": "disaggregated",
                    "replicas": 2,
                    "prefill": {"replicas": 1},
                    "decode": {"replicas": 1},
                }
            },
            "topology.replicas is only valid with mode=colocated",
        ),
        (
            {
                "gpus": {"countPerPod": 4},
                "topology": {
                    "mode": "disaggregated",
                    "prefill": {"replicas": 1, "tensorParallelSize": 3},
                    "decode": {"replicas": 1},
                },
            },
            "topology.prefill: tensorParallelSize=3 must divide gpusPerPod=4",
        ),
        (
            {
                "model": {"name": "m", "tensorParallelSize": 2},
                "gpus": {"countPerPod": 2},
                "topology": {
                    "mode": "disaggregated",
                    "prefill": {"replicas": 1},
                    "decode": {"replicas": 1, "gpusPerPod": 3},
                },
            },
            "topology.decode: tensorParallelSize=2 must divide gpusPerPod=3",
        ),
    ],
)
def test_invalid_specs_name_the_problem(over: dict[str, Any], fragment: str) -> None:
    with pytest.raises(InvalidSpecError) as err:
        parse(**over)
    # each problem starts its own "; "-separated item (after the field's location, if any)
    parts = str(err.value).split("; ")
    assert any(p.startswith(fragment) or f": {fragment}" in p for p in parts), parts


def test_several_problems_are_reported_together_without_pydantic_prefixes() -> None:
    with pytest.raises(InvalidSpecError) as err:
        parse(model={"name": "m", "blockSize": 24}, router={"policy": "nope"})
    msg = str(err.value)
    assert msg.startswith("model.blockSize=24 must be a multiple of 16; router.policy='nope'")
    assert "Value error" not in msg


def test_field_errors_are_reported_together() -> None:
    with pytest.raises(InvalidSpecError) as err:
        parse(model={"name": "m", "blockSize": 0}, router={"replicas": -1})
    items = str(err.value).split("; ")
    assert [i.split(":")[0] for i in items] == ["model.blockSize", "router.replicas"]


def test_valid_cross_field_combinations() -> None:
    assert parse(globalKV={"enabled": True, "protocol": "rdma", "deviceNames": ["mlx5_0", "a.b-c"]})
    assert parse(globalKV={"protocol": "rdma"})  # rdma without the tier enabled needs no device
    assert parse(gpus={"countPerPod": 4}, model={"name": "m", "tensorParallelSize": 2})
    assert parse(model={"name": "m", "blockSize": 32}).model.block_size == 32
    role = {"replicas": 1, "tensorParallelSize": 2, "gpusPerPod": 2}
    s = parse(gpus={"countPerPod": 3}, topology={"mode": "disaggregated", "prefill": role, "decode": role})
    assert s.topology.decode is not None and s.topology.decode.gpus_per_pod == 2


def test_a_colocated_pool_runs_no_sidecar_so_its_tag_is_not_checked() -> None:
    s = parse(topology={"replicas": 1, "pdConnector": "mooncake", "routingSidecar": {"tag": "v0.8.0"}})
    assert s.topology.routing_sidecar.tag == "v0.8.0"


def test_policy_owned_parameters_are_kept_as_given() -> None:
    p = parse(router={"policy": "smetric", "parameters": {"slack": 1.5, "hitRatio": 0.4}}).router.parameters
    assert p.policy_owned == {"slack": 1.5, "hitRatio": 0.4}
    rejects("router.parameters", router={"parameters": {"slack": "fast"}})


def test_policy_context_is_typed_and_kept_apart_from_policy_owned_keys() -> None:
    p = parse(
        router={"parameters": {"costModel": {"cLinS": 1e-4, "cAttS": 0.0}, "tpot_slo_s": 0.05, "slack": 2.0}}
    ).router.parameters
    assert p.cost_model is not None and (p.cost_model.c_lin_s, p.cost_model.c_att_s) == (1e-4, 0.0)
    assert p.tpot_slo_s == 0.05  # the Python name works as well as tpotSloS
    assert p.policy_owned == {"slack": 2.0}
    with pytest.raises(ValueError, match="frozen"):
        p.tpot_slo_s = 1.0


def test_deprecated_policies_name() -> None:
    assert parse(policies={"podDisruptionBudget": False}).protection.pod_disruption_budget is False
    same = {"networkPolicy": False}
    assert parse(policies=same, protection=same).protection.network_policy is False
    with pytest.raises(InvalidSpecError) as err:
        parse(policies={"podDisruptionBudget": False}, protection={"podDisruptionBudget": True})
    assert str(err.value) == (
        "protection and its deprecated name policies are both set, to different values; set protection only"
    )


def test_spec_must_be_a_mapping() -> None:
    with pytest.raises(InvalidSpecError, match=r"^spec must be a mapping$"):
        parse_spec(["model"])
