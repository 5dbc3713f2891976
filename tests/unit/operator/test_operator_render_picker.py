"""Renderer, the picker side: its args and config as the picker parses them, the InferencePool."""

from __future__ import annotations

import pytest
import yaml

from smetric.core.pickerflags import build_parser
from smetric.policy.params import SMetricParams
from tests.support.operator_render import (
    DEFAULT_FLOW_CONTROL,
    VARIANTS,
    by_name,
    container,
    env,
    render,
    spec,
)


def test_picker_args_parse_with_the_pickers_own_parser() -> None:
    children = render(VARIANTS["disaggregated-mooncake-global-kv"])
    dep = by_name(children, "Deployment", "p-epp")
    epp = container(dep, "epp")
    parsed = build_parser().parse_args(epp["args"])
    assert parsed.grpc_port == 9002 and parsed.grpc_health_port == 9003 and parsed.metrics_port == 9090
    assert parsed.config == "/etc/smetric/config.yaml"
    assert parsed.pool_name == "p" and parsed.pool_namespace == "ns"
    assert parsed.prefix_index == "precise" and parsed.tokenizer == "Qwen/Qwen3-Coder-30B-A3B-Instruct"
    assert parsed.hash_seed == "0" and parsed.block_size == 16 and parsed.kv_events_port == 5557
    # Upstream service names; liveness never depends on the pool's engines
    assert epp["readinessProbe"]["grpc"] == {"port": 9003, "service": "readiness"}
    assert epp["livenessProbe"]["grpc"] == {"port": 9003, "service": "liveness"}
    assert epp["startupProbe"]["grpc"] == {"port": 9003, "service": "liveness"}
    assert parsed.secure_serving is True
    assert epp["resources"]["requests"] == {"cpu": "2"}
    assert env(epp)["PYTHONHASHSEED"] == "0"
    pod = dep["spec"]["template"]["spec"]
    assert pod["serviceAccountName"] == "p-epp"
    assert pod["volumes"][0] == {"name": "config", "configMap": {"name": "p-epp-config"}}
    svc = by_name(children, "Service", "p-epp")
    grpc = next(p for p in svc["spec"]["ports"] if p["port"] == 9002)
    assert grpc["appProtocol"] == "http2"  # TLS by default
    role = by_name(children, "Role", "p-epp")
    assert role["rules"] == [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list", "watch"]},
        {
            "apiGroups": ["inference.networking.k8s.io"],
            "resources": ["inferencepools"],
            "verbs": ["get", "list", "watch"],
        },
    ]
    custom = spec(model={"name": "emu", "command": ["smetric", "emulate"]})
    assert "tokenizer" not in " ".join(
        container(by_name(render(custom), "Deployment", "p-epp"), "epp")["args"]
    )


def test_policy_config_map() -> None:
    raw = spec(
        router={
            "policy": "lmetric",
            "parameters": {
                "slack": 2.0,
                "hitRatio": 0.3,
                "tpotSloS": 0.033,
                "costModel": {"cLinS": 1e-4, "cAttS": 2e-8},
            },
        }
    )
    children = render(raw)
    config = yaml.safe_load(by_name(children, "ConfigMap", "p-epp-config")["data"]["config.yaml"])
    assert config == {
        "policy": {
            "name": "lmetric",
            "parameters": {
                "slack": 2.0,
                "hitRatio": 0.3,
                "mode": "colocated",
                "ttftSloBaseS": 1.0,
                "ttftSloPerKTokS": 0.0625,
                "tpotSloS": 0.033,
                "blockTokens": 16,
                "costModel": {"cLinS": 1e-4, "cAttS": 2e-8},
            },
        },
        "pdDisaggregation": {"enabled": False},
        "flowControl": DEFAULT_FLOW_CONTROL,
        "servedModels": ["Qwen/Qwen3-Coder-30B-A3B-Instruct"],
    }
    from smetric.epp.config import parse_config, policy_params

    params = policy_params(parse_config(config))
    assert params.cost_model.c_lin_s == 1e-4 and params.cost_model.c_att_s == 2e-8
    # A policy change rolls the picker pods (config hash in the pod template) ...
    before = by_name(render(spec()), "Deployment", "p-epp")["spec"]["template"]["metadata"]["annotations"]
    after = by_name(children, "Deployment", "p-epp")["spec"]["template"]["metadata"]["annotations"]
    assert before != after


def test_inference_pool() -> None:
    pool = by_name(render(spec()), "InferencePool", "p")
    assert pool["spec"] == {
        "selector": {"matchLabels": {"smetric.io/pool": "p", "app.kubernetes.io/component": "model-server"}},
        "targetPorts": [{"number": 8000}],
        "endpointPickerRef": {
            "group": "",
            "kind": "Service",
            "name": "p-epp",
            "port": {"number": 9002},
            "failureMode": "FailClose",
        },
    }
    # The pool selects every model-server pod, whatever its role.
    for variant in ("colocated", "disaggregated-nixl"):
        for child in render(VARIANTS[variant]):
            labels = child["metadata"]["labels"]
            if labels["app.kubernetes.io/component"] == "model-server" and child["kind"] == "Deployment":
                template_labels = child["spec"]["template"]["metadata"]["labels"]
                assert pool["spec"]["selector"]["matchLabels"].items() <= template_labels.items()


@pytest.mark.parametrize("variant", sorted(VARIANTS))
def test_policy_config_is_accepted_by_the_picker(variant: str) -> None:
    """Contract with the picker: its own config parser and the policies' parameter parser accept it."""
    from smetric.epp.config import parse_config, policy_params

    (config_map,) = [c for c in render(VARIANTS[variant]) if c["kind"] == "ConfigMap"]
    cfg = parse_config(yaml.safe_load(config_map["data"]["config.yaml"]), "rendered")
    params = policy_params(cfg)
    # the pool's default policy (registry.default_policy): smetric, with a global KV tier or without
    assert cfg.policy.name == "smetric"
    assert params.mode == ("disaggregated" if variant.startswith("disaggregated") else "colocated")
    own = params.get(SMetricParams)  # defaults: the rendered config sets no policy-owned key
    assert own.hit_ratio == 0.5 and own.slack == 1.0


def test_global_fetch_parameter_reaches_the_picker_config_only_with_a_global_tier() -> None:
    from smetric.operator.render_picker import policy_config
    from smetric.operator.spec import SMetricPoolSpec
    from smetric.policy import params_from_mapping

    base = {
        "model": {"name": "Qwen/Qwen3-Coder-30B-A3B-Instruct"},
        "topology": {"mode": "colocated", "replicas": 2},
        "router": {"parameters": {"globalFetchSPerToken": 3.93e-6}},
    }
    with_tier = SMetricPoolSpec.model_validate({**base, "globalKV": {"enabled": True}})
    params = policy_config(with_tier)["policy"]["parameters"]
    assert params["globalFetchSPerToken"] == 3.93e-6
    assert params_from_mapping(params).global_fetch_s_per_token == 3.93e-6
    without = SMetricPoolSpec.model_validate({**base, "globalKV": {"enabled": False}})
    assert "globalFetchSPerToken" not in policy_config(without)["policy"]["parameters"]


def test_global_segment_tokens_are_one_pods_segment_over_kv_bytes_per_token() -> None:
    # SMetric's picker bounds its estimate of what the tier still holds by this x the engines it
    # discovers: every engine pod contributes one Mooncake segment (render_kv's
    # global_segment_size). Per pod, so a scale never changes the picker's config.
    from smetric.core.presets import get_preset
    from smetric.operator.render_picker import policy_config
    from smetric.operator.spec import SMetricPoolSpec
    from smetric.policy import params_from_mapping

    model = {"name": "Qwen/Qwen3-Coder-30B-A3B-Instruct", "kvCacheDtype": "fp8"}
    kv_bytes = get_preset("qwen3-30b-h20/kv=fp8").model.kv_bytes_per_token
    assert kv_bytes == 49_152  # 48 layers x 4 KV heads x 128 x 2 (K and V) x 1 byte

    def pool(replicas: int, **extra: object) -> SMetricPoolSpec:
        return SMetricPoolSpec.model_validate(
            {
                "model": model,
                "topology": {"mode": "colocated", "replicas": replicas},
                "globalKV": {"enabled": True, "segmentSize": "16Gi"},
                **extra,
            }
        )

    params = policy_config(pool(4))["policy"]["parameters"]
    assert params["globalSegmentTokens"] == int(16 * 2**30 // kv_bytes)
    assert params_from_mapping(params).global_segment_tokens == params["globalSegmentTokens"]
    assert params["globalChunkTokens"] == 256  # LMCache chunk_size: the write estimate's unit
    assert policy_config(pool(9)) == policy_config(pool(4))  # scaling leaves the config alone
    # a segment smaller than one token's KV still counts as one token (never 0: no tier at all)
    tiny = SMetricPoolSpec.model_validate(
        {
            "model": model,
            "topology": {"mode": "colocated", "replicas": 1},
            "globalKV": {"enabled": True, "segmentSize": "32Ki"},
        }
    )
    assert policy_config(tiny)["policy"]["parameters"]["globalSegmentTokens"] == 1
    explicit = pool(4, router={"parameters": {"globalSegmentTokens": 1000}})
    assert policy_config(explicit)["policy"]["parameters"]["globalSegmentTokens"] == 1000
    no_tier = SMetricPoolSpec.model_validate(
        {"model": model, "topology": {"mode": "colocated", "replicas": 4}}
    )
    assert "globalSegmentTokens" not in policy_config(no_tier)["policy"]["parameters"]
    unknown = SMetricPoolSpec.model_validate(
        {
            "model": {"name": "org/no-preset"},
            "topology": {"mode": "colocated", "replicas": 4},
            "globalKV": {"enabled": True},
        }
    )
    assert "globalSegmentTokens" not in policy_config(unknown)["policy"]["parameters"]


def test_the_picker_config_names_the_served_model_when_the_spec_names_them_all() -> None:
    """servedModels bounds the picker's model label (and 404s other models) when the operator
    knows every name the engines serve; otherwise the picker discovers them from /v1/models."""
    from smetric.operator.render_picker import policy_config
    from smetric.operator.spec import SMetricPoolSpec
    from smetric.policy.pickerconfig import validate_config

    def cfg(**model: object) -> dict[str, object]:
        spec = SMetricPoolSpec.model_validate(
            {"model": {"name": "Qwen/Qwen3-8B", **model}, "topology": {"mode": "colocated", "replicas": 2}}
        )
        return policy_config(spec)

    assert cfg()["servedModels"] == ["Qwen/Qwen3-8B"]
    assert validate_config(cfg(servedName="qwen")).servedModels == ("qwen",)
    assert "servedModels" not in cfg(command=["smetric", "emulate"])  # a custom engine: discovered
    assert "servedModels" not in cfg(extraArgs=["--enable-lora", "--max-loras", "4"])
    assert "servedModels" not in cfg(extraArgs=["--lora-modules=a=/adapters/a"])
    assert "servedModels" not in cfg(extraArgs=["--served-model-name", "a", "b"])  # more names
    assert "servedModels" not in cfg(extraArgs=["--served-model-name=a"])
    assert cfg(extraArgs=["--max-num-seqs=8"])["servedModels"] == ["Qwen/Qwen3-8B"]
    pd = SMetricPoolSpec.model_validate(  # a role's own arguments count too
        {
            "model": {"name": "Qwen/Qwen3-8B"},
            "topology": {
                "mode": "disaggregated",
                "prefill": {"replicas": 1, "extraArgs": ["--enable-lora"]},
                "decode": {"replicas": 1},
            },
        }
    )
    assert "servedModels" not in policy_config(pd)
