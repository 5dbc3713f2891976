"""The picker's manifests, asserted value by value (docs/mutation.md).

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
from smetric.operator.spec import InvalidSpecError, parse_spec
from tests.support.operator_render import DEFAULT_FLOW_CONTROL

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
        ("Service", "p-epp-peers"),  # 2 replicas: their --peers (headless)
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
            "name": "smetric",  # the no-tier default (registry.default_policy)
            "parameters": {
                "mode": "colocated",
                "ttftSloBaseS": 1.0,
                "ttftSloPerKTokS": 0.0625,
                "tpotSloS": 0.02,
                "blockTokens": 16,
            },
        },
        "pdDisaggregation": {"enabled": False},
        "flowControl": DEFAULT_FLOW_CONTROL,
        "servedModels": ["org/m"],  # the model the rendered `vllm serve` serves
    }
    assert cm["data"]["config.yaml"].startswith("policy:\n  name: smetric\n")  # key order kept


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


def test_replicas_share_the_responses_map_through_a_headless_service() -> None:
    """2+ replicas: --snapshot-port and --peers naming a headless Service of the replicas, whose
    snapshot port only the replicas reach; one replica: none of it."""
    from smetric.operator.render_netpol import network_policies

    out = picker(POOL, parse_spec(raw()))
    (peers,) = [m for m in out if m["metadata"]["name"] == "p-epp-peers"]
    assert peers["apiVersion"] == "v1" and peers["kind"] == "Service"
    assert peers["spec"]["clusterIP"] == "None" and peers["spec"]["selector"] == SELECTOR
    assert peers["spec"]["ports"] == [{"name": "snapshot", "port": 9004, "targetPort": 9004}]
    args = next(m for m in out if m["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    assert "--snapshot-port=9004" in args and "--peers=p-epp-peers.team-a.svc:9004" in args
    ports = next(m for m in out if m["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0][
        "ports"
    ]
    assert ports[-1] == {
        "name": "snapshot",
        "containerPort": 9004,
        "protocol": "TCP",
    }  # the Service's targetPort
    (epp_policy, *_) = network_policies(POOL, parse_spec(raw()))
    rule = epp_policy["spec"]["ingress"][-1]
    assert rule["ports"] == [{"port": 9004, "protocol": "TCP"}]
    assert rule["from"] == [{"podSelector": {"matchLabels": SELECTOR}}]
    one = picker(POOL, parse_spec(raw(router={"replicas": 1})))
    assert all(m["metadata"]["name"] != "p-epp-peers" for m in one)
    one_args = next(m for m in one if m["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][0][
        "args"
    ]
    assert not any(a.startswith(("--peers", "--snapshot-port")) for a in one_args)
    one_ports = next(m for m in one if m["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][
        0
    ]["ports"]
    assert [p["name"] for p in one_ports] == ["grpc", "grpc-health", "metrics"]
    two = picker(POOL, parse_spec(raw(router={"replicas": 2})))  # the smallest count with peers
    assert any(m["metadata"]["name"] == "p-epp-peers" for m in two)
    two_ports = next(m for m in two if m["kind"] == "Deployment")["spec"]["template"]["spec"]["containers"][
        0
    ]["ports"]
    assert two_ports[-1]["name"] == "snapshot"
