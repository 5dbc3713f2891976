"""The rendered ``--kv-transfer-config`` of every ``pdConnector`` (with and without the global KV
tier) is accepted by the pinned vLLM (0.32): ``KVTransferConfig`` parses it, every connector it names
is registered, and the Mooncake bootstrap port the render sets is the one vLLM reads.

Needs the vLLM tier's venv (``bash tests/integration/vllm/install_vllm_tier.sh .venv-vllm``;
``$SMETRIC_VLLM_VENV`` or the checkout's ``.venv-vllm``); skips with a message when it is missing.
"""

from __future__ import annotations

import json
import subprocess
import typing

import pytest

from smetric.operator.spec import TopologySpec
from tests.support.operator_render import by_name, container, env, flag, render, spec
from tests.support.vllm_tier import tier_python

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

PROBE = """
import json, os, sys
from vllm.config import KVTransferConfig
from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory
out = []
for config, bootstrap in json.load(sys.stdin):
    parsed = KVTransferConfig(**config)
    names = [parsed.kv_connector]
    names += [c["kv_connector"] for c in (parsed.kv_connector_extra_config or {}).get("connectors", [])]
    os.environ.pop("VLLM_MOONCAKE_BOOTSTRAP_PORT", None)
    if bootstrap is not None:
        os.environ["VLLM_MOONCAKE_BOOTSTRAP_PORT"] = bootstrap
    import vllm.envs as envs
    out.append({"registered": [n in KVConnectorFactory._registry for n in names],
                "role": parsed.kv_role, "bootstrap_port": envs.VLLM_MOONCAKE_BOOTSTRAP_PORT})
print(json.dumps(out))
"""


def test_rendered_connectors_are_accepted_by_vllm() -> None:
    py = tier_python()
    cases = []
    for connector in typing.get_args(TopologySpec.model_fields["pd_connector"].annotation):
        for global_kv in (False, True):
            topology = {
                "mode": "disaggregated",
                "prefill": {"replicas": 1},
                "decode": {"replicas": 1},
                "pdConnector": connector,
            }
            children = render(spec(topology=topology, globalKV={"enabled": global_kv}))
            for role in ("prefill", "decode"):
                vllm = container(by_name(children, "Deployment", f"p-{role}"))
                config = json.loads(flag(vllm["args"], "--kv-transfer-config"))
                cases.append((config, env(vllm).get("VLLM_MOONCAKE_BOOTSTRAP_PORT")))
            sidecar = container(by_name(children, "Deployment", "p-decode"), "routing-sidecar")
            port = [a.split("=", 1)[1] for a in sidecar["args"] if a.startswith("--mooncake-bootstrap-port=")]
            if connector == "mooncake":
                assert port == ["8998"]
    result = subprocess.run(
        [str(py), "-c", PROBE], input=json.dumps(cases), capture_output=True, text=True, timeout=600
    )
    assert result.returncode == 0, result.stderr[-3000:]
    answers = json.loads(result.stdout.strip().splitlines()[-1])
    for (config, bootstrap), answer in zip(cases, answers, strict=True):
        assert all(answer["registered"]), config
        assert answer["role"] == config["kv_role"]
        if bootstrap is not None:  # vLLM's bootstrap server listens where the sidecar asks
            assert answer["bootstrap_port"] == int(bootstrap) == 8998
