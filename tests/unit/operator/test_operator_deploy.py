"""Every rendered pod of every sample starts on paper (review items 1-12, one test or
rendered-output assertion each)."""

from __future__ import annotations

import re
from pathlib import Path
from typing import Any

import pytest
import yaml

from smetric.core.pickerflags import build_parser
from smetric.operator.advice import context_warnings, servable_share
from smetric.operator.cli import main
from smetric.operator.spec import InvalidSpecError, parse_spec
from tests.support.crd_schema import validate_crd
from tests.support.operator_render import (
    by_name,
    container,
    env,
    flag,
    render,
    spec,
    validate,
)

ROOT = Path(__file__).resolve().parents[3]
SAMPLES = sorted((ROOT / "manifests" / "samples").glob("*.yaml"))
# Supported Kubernetes versions (native sidecars, grpc probes and CEL rules need >= 1.29).
K8S_VERSIONS = ("1.30.0", "1.31.0", "1.32.0", "1.33.0")
# Provider kinds (Istio, GKE): rendered only for their gateway.provider.
FOREIGN_KINDS = {"DestinationRule", "HealthCheckPolicy", "GCPBackendPolicy"}
STORAGE = {"claimName": "models", "mountPath": "/models", "readOnly": True, "hfCache": True}


def _render_file(path: Path, capsys: pytest.CaptureFixture[str]) -> tuple[list[dict[str, Any]], str]:
    assert main(["render", str(path)]) == 0
    out = capsys.readouterr()
    return [d for d in yaml.safe_load_all(out.out) if d], out.err


def _pods(docs: list[dict[str, Any]]) -> list[tuple[str, dict[str, Any]]]:
    return [(d["metadata"]["name"], d["spec"]["template"]["spec"]) for d in docs if d["kind"] == "Deployment"]


@pytest.mark.parametrize("sample", SAMPLES, ids=lambda p: p.stem)
def test_samples_start_on_paper(sample: Path, capsys: pytest.CaptureFixture[str]) -> None:
    if sample.stem == "gateway":
        pytest.skip("a Gateway, not a pool")
    docs, _ = _render_file(sample, capsys)
    for version in K8S_VERSIONS:
        for doc in docs:
            validate(doc, version)
    for name, pod in _pods(docs):
        mounted = {v["name"] for v in pod.get("volumes", [])}
        for c in pod["containers"] + pod.get("initContainers", []):
            assert not c["image"].endswith(":latest") and ":" in c["image"], (name, c["image"])  # item 10
            assert {m["name"] for m in c.get("volumeMounts", [])} <= mounted, name  # every volume exists
            assert c.get("securityContext", {}).get("allowPrivilegeEscalation") is False, name
            assert "ALL" in c["securityContext"]["capabilities"]["drop"]
        assert pod["securityContext"]["seccompProfile"] == {"type": "RuntimeDefault"}
        main_c = pod["containers"][0]
        if main_c["name"] == "vllm" and "httpGet" in main_c.get("livenessProbe", {}):
            # item 3 (engines): liveness only after a startup probe that allows an hour of model load
            startup = main_c["startupProbe"]
            assert startup["periodSeconds"] * startup["failureThreshold"] >= 3600
        if main_c["name"] == "epp":  # item 3: the picker's liveness never depends on the engines
            assert main_c["livenessProbe"]["grpc"]["service"] == "liveness"
            build_parser().parse_args(main_c["args"])  # its command line parses
    assert "&id" not in yaml.safe_dump_all(docs) and "*id" not in yaml.safe_dump_all(docs)


def test_rendered_yaml_has_no_anchors(capsys: pytest.CaptureFixture[str]) -> None:
    """Item 12: shared sub-objects (tolerations, labels) are written out, not as &id001 / *id001."""
    assert main(["render", str(ROOT / "manifests" / "samples" / "colocated-qwen3-coder-30b.yaml")]) == 0
    out = capsys.readouterr().out
    assert not re.search(r"[&*]id\d+", out)


def test_render_missing_file_is_a_clear_error(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", "/nonexistent.yaml"]) == 2
    err = capsys.readouterr().err
    assert "/nonexistent.yaml: cannot read" in err and "Traceback" not in err


def test_help_texts_show_defaults(capsys: pytest.CaptureFixture[str]) -> None:
    with pytest.raises(SystemExit):
        main(["render", "--help"])
    assert "(default: default)" in capsys.readouterr().out


def test_picker_tokenizer_comes_from_the_model_volume() -> None:
    """Item 1: precise index + weights PVC: the picker mounts it read-only and loads offline."""
    children = render(spec(model={"name": "Qwen/Q", "storage": STORAGE}, router={"prefixIndex": "precise"}))
    epp_dep = by_name(children, "Deployment", "p-epp")
    epp = container(epp_dep, "epp")
    parsed = build_parser().parse_args(epp["args"])
    assert parsed.tokenizer == "Qwen/Q"
    assert env(epp)["HF_HOME"] == "/models" and env(epp)["HF_HUB_OFFLINE"] == "1"
    pvc = next(v for v in epp_dep["spec"]["template"]["spec"]["volumes"] if v["name"] == "model")
    assert pvc["persistentVolumeClaim"] == {"claimName": "models", "readOnly": True}
    assert {"name": "model", "mountPath": "/models", "readOnly": True} in epp["volumeMounts"]
    # No volume: a writable hub cache (the root filesystem is read-only) and the HF token if any.
    children = render(
        spec(model={"name": "Qwen/Q", "hfTokenSecret": {"name": "hf"}}, router={"prefixIndex": "precise"})
    )
    epp = container(by_name(children, "Deployment", "p-epp"), "epp")
    assert env(epp)["HF_HOME"] == "/var/cache/huggingface"
    assert env(epp)["HF_TOKEN"] == {"secretKeyRef": {"name": "hf", "key": "HF_TOKEN"}}


def test_model_storage_token_and_env_on_engines() -> None:
    """Item 4: weights volume, HF token secret, env."""
    raw = spec(
        model={
            "name": "Qwen/Q",
            "storage": {**STORAGE, "readOnly": False},
            "hfTokenSecret": {"name": "hf", "key": "token"},
            "env": [{"name": "VLLM_LOGGING_LEVEL", "value": "DEBUG"}],
        }
    )
    dep = by_name(render(raw), "Deployment", "p-prefill-decode")
    vllm = container(dep)
    e = env(vllm)
    assert e["HF_HOME"] == "/models" and "HF_HUB_OFFLINE" not in e  # writable: vLLM may download
    assert e["HF_TOKEN"] == {"secretKeyRef": {"name": "hf", "key": "token"}}
    assert e["VLLM_LOGGING_LEVEL"] == "DEBUG"
    assert {"name": "model", "mountPath": "/models", "readOnly": False} in vllm["volumeMounts"]


def test_picker_tls_by_default_plaintext_and_mounted_certificates() -> None:
    """Item 5."""
    default = render(spec())
    epp = container(by_name(default, "Deployment", "p-epp"), "epp")
    assert build_parser().parse_args(epp["args"]).secure_serving is True
    plain = render(spec(router={"secureServing": False}))
    epp = container(by_name(plain, "Deployment", "p-epp"), "epp")
    assert build_parser().parse_args(epp["args"]).secure_serving is False
    svc = by_name(plain, "Service", "p-epp")
    assert svc["spec"]["ports"][0]["appProtocol"] == "kubernetes.io/h2c"
    mounted = render(spec(router={"certSecretName": "epp-tls"}))
    dep = by_name(mounted, "Deployment", "p-epp")
    epp = container(dep, "epp")
    assert build_parser().parse_args(epp["args"]).cert_path == "/etc/smetric/tls"
    assert {"name": "tls", "secret": {"secretName": "epp-tls"}} in dep["spec"]["template"]["spec"]["volumes"]


def test_pd_sample_requests_host_memory_and_mooncake_resources(capsys: pytest.CaptureFixture[str]) -> None:
    """Item 8: shm + Mooncake segment + LMCache buffers are requested; the master has resources."""
    docs, _ = _render_file(ROOT / "manifests" / "samples" / "disaggregated-qwen3-235b.yaml", capsys)
    for name in ("qwen3-235b-pd-prefill", "qwen3-235b-pd-decode"):
        vllm = container(by_name(docs, "Deployment", name))
        # 64Gi process + 64Gi shm + 128Gi segment + 2Gi buffer + 5 GB local CPU = 263Gi
        assert vllm["resources"]["requests"]["memory"] == "263Gi"
    master = container(by_name(docs, "Deployment", "qwen3-235b-pd-mooncake-master"), "mooncake-master")
    assert master["resources"]["requests"]["memory"] == "4Gi" and master["resources"]["limits"]["memory"]


def test_per_role_parallelism_and_pod_overrides() -> None:
    """Item 11: separate TP and GPU count per role, per-role resources/env/nodeSelector/affinity/
    tolerations/imagePullSecrets/volumes, and engine-wide overrides."""
    raw = spec(
        topology={
            "mode": "disaggregated",
            "prefill": {"replicas": 2, "tensorParallelSize": 2, "gpusPerPod": 4},
            "decode": {
                "replicas": 2,
                "tensorParallelSize": 8,
                "gpusPerPod": 8,
                "pod": {
                    "resources": {"requests": {"cpu": "30"}},
                    "env": [{"name": "ROLE", "value": "decode"}],
                    "nodeSelector": {"pool": "decode"},
                    "tolerations": [{"key": "decode", "operator": "Exists"}],
                    "volumes": [{"name": "scratch", "emptyDir": {}}],
                    "volumeMounts": [{"name": "scratch", "mountPath": "/scratch"}],
                    "affinity": {"podAntiAffinity": {}},
                },
            },
        },
        gpus={"countPerPod": 4},
        engine={"pod": {"imagePullSecrets": [{"name": "regcred"}], "annotations": {"a": "b"}}},
    )
    children = render(raw)
    prefill, decode = (
        by_name(children, "Deployment", "p-prefill"),
        by_name(children, "Deployment", "p-decode"),
    )
    pv, dv = container(prefill), container(decode)
    assert (
        flag(pv["args"], "--tensor-parallel-size") == "2" and flag(pv["args"], "--data-parallel-size") == "2"
    )
    assert pv["resources"]["limits"]["nvidia.com/gpu"] == 4
    assert flag(dv["args"], "--tensor-parallel-size") == "8" and "--data-parallel-size" not in dv["args"]
    assert dv["resources"]["limits"]["nvidia.com/gpu"] == 8 and dv["resources"]["requests"]["cpu"] == "30"
    assert env(dv)["ROLE"] == "decode" and "ROLE" not in env(pv)
    dpod = decode["spec"]["template"]["spec"]
    assert dpod["nodeSelector"] == {"pool": "decode"} and "podAntiAffinity" in dpod["affinity"]
    assert {"key": "decode", "operator": "Exists"} in dpod["tolerations"]
    assert {"name": "scratch", "mountPath": "/scratch"} in dv["volumeMounts"]
    for dep in (prefill, decode):
        assert dep["spec"]["template"]["spec"]["imagePullSecrets"] == [{"name": "regcred"}]
        assert dep["spec"]["template"]["metadata"]["annotations"] == {"a": "b"}
    for child in children:
        validate(child)
    with pytest.raises(InvalidSpecError, match="tensorParallelSize=3 must divide gpusPerPod=4"):
        parse_spec(
            spec(
                topology={
                    "mode": "disaggregated",
                    "prefill": {"replicas": 1, "tensorParallelSize": 3},
                    "decode": {"replicas": 1},
                },
                gpus={"countPerPod": 4},
            )
        )


def test_autoscaled_roles_leave_replicas_to_the_autoscaler() -> None:
    """Item 11: server-side apply never sends replicas an HPA owns."""
    dep = by_name(
        render(spec(topology={"replicas": 4, "autoscaled": True})), "Deployment", "p-prefill-decode"
    )
    assert "replicas" not in dep["spec"]
    dep = by_name(render(spec()), "Deployment", "p-prefill-decode")
    assert dep["spec"]["replicas"] == 4


def test_pdb_network_policies_and_pod_monitors() -> None:
    """Item 10 (PDB, NetworkPolicy) and observability (PodMonitors)."""
    children = render(spec(observability={"podMonitor": True}, globalKV={"enabled": True}))
    pdb = by_name(children, "PodDisruptionBudget", "p-prefill-decode")
    assert pdb["spec"]["maxUnavailable"] == 1
    engines = by_name(children, "NetworkPolicy", "p-model-server")
    assert {"ports": [{"protocol": "TCP", "port": 8000}]} in engines["spec"]["ingress"]
    picker = by_name(children, "NetworkPolicy", "p-endpoint-picker")
    assert {p["port"] for p in picker["spec"]["ingress"][0]["ports"]} == {9002, 9003, 9090}
    by_name(children, "NetworkPolicy", "p-mooncake-master")
    monitors = {c["metadata"]["name"] for c in children if c["kind"] == "PodMonitor"}
    assert monitors == {"p-endpoint-picker", "p-model-server"}
    off = render(spec(policies={"networkPolicy": False, "podDisruptionBudget": False}))
    assert not [c for c in off if c["kind"] in ("NetworkPolicy", "PodDisruptionBudget")]


def test_service_monitor_scrapes_the_pickers_metrics_service() -> None:
    """A ServiceMonitor for the picker's Service beside the engines' PodMonitor (the
    picker's PodMonitor is then not rendered: one scrape, not two)."""
    children = render(spec(observability={"podMonitor": True, "serviceMonitor": True}))
    for c in children:
        validate(c)
    (sm,) = [c for c in children if c["kind"] == "ServiceMonitor"]
    svc = by_name(children, "Service", "p-epp")
    assert sm["spec"]["selector"]["matchLabels"].items() <= svc["metadata"]["labels"].items()
    assert sm["spec"]["namespaceSelector"] == {"matchNames": [svc["metadata"]["namespace"]]}
    (endpoint,) = sm["spec"]["endpoints"]
    assert endpoint["port"] in {p["name"] for p in svc["spec"]["ports"]} and endpoint["path"] == "/metrics"
    assert {c["metadata"]["name"] for c in children if c["kind"] == "PodMonitor"} == {"p-model-server"}
    only = render(spec(observability={"serviceMonitor": True}))
    assert [c["kind"] for c in only if c["kind"].endswith("Monitor")] == ["ServiceMonitor"]
    assert not [c for c in render(spec()) if c["kind"].endswith("Monitor")]


def test_gateway_providers_and_model_header_matches() -> None:
    """Gateway providers (Istio DestinationRule with TLS to the picker, GKE policies) and item 9:
    two pools on one Gateway are told apart by the model header."""
    gw = {"parentRef": {"name": "gw"}}
    istio = render(spec(gateway={**gw, "provider": "istio"}))
    rule = by_name(istio, "DestinationRule", "p-epp")
    assert rule["spec"]["host"] == "p-epp.ns.svc.cluster.local"
    assert rule["spec"]["trafficPolicy"]["tls"] == {"mode": "SIMPLE", "insecureSkipVerify": True}
    gke = render(spec(gateway={**gw, "provider": "gke"}))
    hc = by_name(gke, "HealthCheckPolicy", "p")
    assert hc["spec"]["targetRef"] == {
        "group": "inference.networking.k8s.io",
        "kind": "InferencePool",
        "name": "p",
    }
    assert by_name(gke, "GCPBackendPolicy", "p")["spec"]["default"]["timeoutSec"] >= 300
    for provider in ("none", "kgateway", "envoy-gateway"):
        kinds = {c["kind"] for c in render(spec(gateway={**gw, "provider": provider}))}
        assert not kinds & FOREIGN_KINDS
    a = render(spec(model={"name": "a", "servedName": "model-a"}, gateway={**gw, "matchModelHeader": True}))
    route = by_name(a, "HTTPRoute", "p")
    match = route["spec"]["rules"][0]["matches"][0]
    assert match["headers"] == [{"type": "Exact", "name": "X-Gateway-Model-Name", "value": "model-a"}]
    validate_crd(route)


def test_render_warns_when_the_context_limit_is_far_below_agent_traffic() -> None:
    """Samples sized for agent traffic: 131072 fits ~70 % of the shared trace, 262144 ~93 %."""
    assert servable_share(131_072) == pytest.approx(70.42)
    assert servable_share(262_144) == pytest.approx(92.73)
    (warning,) = context_warnings("p", parse_spec(spec(model={"name": "m", "maxModelLen": 131072})))
    assert "70.4 %" in warning
    assert context_warnings("p", parse_spec(spec(model={"name": "m", "maxModelLen": 262144}))) == []
    emulator = spec(model={"name": "e", "command": ["smetric", "emulate"]})
    assert context_warnings("p", parse_spec(emulator)) == []


@pytest.mark.parametrize("sample", ["colocated-qwen3-coder-30b", "disaggregated-qwen3-235b"])
def test_gpu_samples_are_sized_for_agent_traffic(sample: str, capsys: pytest.CaptureFixture[str]) -> None:
    path = ROOT / "manifests" / "samples" / f"{sample}.yaml"
    _, err = _render_file(path, capsys)
    assert "warning" not in err
    (pool,) = [d for d in yaml.safe_load_all(path.read_text()) if d]
    assert pool["spec"]["model"]["kvCacheDtype"] == "fp8" and pool["spec"]["model"]["maxModelLen"] == 262144
    assert "92.7 %" in path.read_text()  # the share it serves is stated in the sample


def test_deploy_guide_and_kind_script_agree_on_versions() -> None:
    """Item 12: docs/deploy.md names the CRD and gateway versions the kind script installs, and the
    steps from images to a first request."""
    guide = (ROOT / "docs" / "deploy.md").read_text()
    script = (ROOT / "tests" / "e2e" / "kind_e2e.sh").read_text()
    for pattern in (r"GATEWAY_API_VERSION:-(v[\d.]+)", r"GIE_VERSION:-(v[\d.]+)", r"KGTW_VERSION:-(v[\d.]+)"):
        match = re.search(pattern, script)
        assert match and match.group(1) in guide, pattern
    for step in (
        "docker build",
        "docker push",
        "helm install",
        "kubectl apply -f manifests/samples",
        "--for=jsonpath='{.status.phase}'=Ready",
        "/v1/chat/completions",
        "smetric_epp_decisions_total",
        "Troubleshooting",
    ):
        assert step in guide, step
    assert "kind-emulator.yaml" in script and "/v1/chat/completions" in script


# vLLM v0.32.0 engine arguments the renderer and the samples use
# (https://docs.vllm.ai/en/v0.32.0/configuration/engine_args.html; protocols.md records the
# KV-events and KV-transfer flags seen on a real 0.32 engine).
VLLM_FLAGS = {
    "--port",
    "--served-model-name",
    "--tensor-parallel-size",
    "--data-parallel-size",
    "--block-size",
    "--max-model-len",
    "--kv-cache-dtype",
    "--gpu-memory-utilization",
    "--enable-prefix-caching",
    "--enable-chunked-prefill",
    "--kv-events-config",
    "--kv-transfer-config",
}
# llm-d pd-sidecar options (llm-d-inference-scheduler cmd/pd-sidecar, pkg/sidecar options).
SIDECAR_FLAGS = {
    "--port",
    "--vllm-port",
    "--data-parallel-size",
    "--kv-connector",
    "--mooncake-bootstrap-port",
    "--secure-proxy",
}
# mooncake_master flags (protocols.md, Mooncake store deployment guide).
MOONCAKE_FLAGS = {
    "--rpc_port",
    "--rpc_address",
    "--enable_http_metadata_server",
    "--http_metadata_server_port",
    "--metrics_port",
    "--eviction_high_watermark_ratio",
}


@pytest.mark.parametrize("sample", ["colocated-qwen3-coder-30b", "disaggregated-qwen3-235b"])
def test_every_rendered_flag_is_one_the_pinned_images_know(
    sample: str, capsys: pytest.CaptureFixture[str]
) -> None:
    docs, _ = _render_file(ROOT / "manifests" / "samples" / f"{sample}.yaml", capsys)
    for _, pod in _pods(docs):
        for c in pod["containers"] + pod.get("initContainers", []):
            flags = {a.split("=", 1)[0] for a in c.get("args", []) if a.startswith("--")}
            known = {"vllm": VLLM_FLAGS, "routing-sidecar": SIDECAR_FLAGS, "mooncake-master": MOONCAKE_FLAGS}
            if c["name"] in known:
                assert flags <= known[c["name"]], (c["name"], flags - known[c["name"]])
