"""Every ``topology.pdConnector`` value renders a routing sidecar and vLLM connectors that speak the
same P/D protocol for the pinned images, or is refused at parse time with a clear message.

Facts the tests hold the render to (``smetric.operator.sidecar`` cites the sources):
* the sidecar's ``--kv-connector`` values per release: llm-d-inference-scheduler v0.8.0 ``nixlv2``,
  ``shared-storage``, ``sglang``; llm-d-router v0.9.0 adds ``mooncake`` (and
  ``--mooncake-bootstrap-port``, default 8998);
* vLLM 0.32's connectors: NixlConnector (``kv_both``, decoder pulls), MooncakeConnector (prefiller
  ``kv_producer`` pushes to decoder ``kv_consumer``; bootstrap server on
  ``VLLM_MOONCAKE_BOOTSTRAP_PORT``, default 8998).
"""

from __future__ import annotations

import json
import typing
from typing import Any

import pytest

from smetric.operator.sidecar import PD_PROTOCOLS, connector_args, sidecar_image, sidecar_version
from smetric.operator.spec import InvalidSpecError, TopologySpec, parse_spec
from tests.support.operator_render import by_name, container, env, flag, render, spec, validate

PD_CONNECTORS = typing.get_args(TopologySpec.model_fields["pd_connector"].annotation)
# The sidecar's --kv-connector values by release (pkg/sidecar/proxy/options.go at each tag).
SIDECAR_KNOWS = {
    "v0.8.0": {"nixlv2", "shared-storage", "sglang"},
    "v0.9.0": {"nixlv2", "shared-storage", "sglang", "mooncake"},
    "v0.10.0": {"nixlv2", "shared-storage", "sglang", "mooncake", "offloading"},
}
# The sidecar flags the render uses, by release (the pflag names in pkg/sidecar/proxy/options.go).
_COMMON_FLAGS = {"port", "vllm-port", "data-parallel-size", "kv-connector", "connector", "secure-proxy"}
SIDECAR_FLAGS = {
    "v0.8.0": _COMMON_FLAGS,
    "v0.9.0": _COMMON_FLAGS | {"mooncake-bootstrap-port"},
    "v0.10.0": _COMMON_FLAGS | {"mooncake-bootstrap-port"},
}
# The vLLM connector whose kv_transfer_params each sidecar protocol writes, and the roles it takes.
VLLM_SPEAKS = {
    "nixlv2": ("NixlConnector", {"prefill": "kv_both", "decode": "kv_both"}),
    "mooncake": ("MooncakeConnector", {"prefill": "kv_producer", "decode": "kv_consumer"}),
}


def _pd(connector: str, global_kv: bool = False, **sidecar: str) -> dict[str, Any]:
    topology: dict[str, Any] = {
        "mode": "disaggregated",
        "prefill": {"replicas": 1},
        "decode": {"replicas": 1},
        "pdConnector": connector,
    }
    if sidecar:
        topology["routingSidecar"] = sidecar
    return spec(topology=topology, globalKV={"enabled": global_kv})


def _pd_connector(vllm: dict[str, Any]) -> dict[str, Any]:
    config = json.loads(flag(vllm["args"], "--kv-transfer-config"))
    if config["kv_connector"] == "MultiConnector":  # P/D connector first, LMCache second
        first = config["kv_connector_extra_config"]["connectors"][0]
        assert first["kv_role"] == config["kv_role"]
        return dict(first)
    return dict(config)


def test_every_value_has_a_protocol() -> None:
    assert set(PD_CONNECTORS) == set(PD_PROTOCOLS) and PD_CONNECTORS


@pytest.mark.parametrize("global_kv", [False, True], ids=["pd", "pd+global-kv"])
@pytest.mark.parametrize("connector", PD_CONNECTORS)
def test_sidecar_and_vllm_speak_the_same_protocol(connector: str, global_kv: bool) -> None:
    children = render(_pd(connector, global_kv))
    for child in children:
        validate(child)
    decode = by_name(children, "Deployment", "p-decode")
    sidecar = container(decode, "routing-sidecar")
    image, tag = sidecar["image"].rsplit(":", 1)
    args = dict(a.removeprefix("--").split("=", 1) for a in sidecar["args"])
    assert set(args) <= SIDECAR_FLAGS[tag], set(args) - SIDECAR_FLAGS[tag]
    protocol = args["kv-connector"]
    assert protocol in SIDECAR_KNOWS[tag], (tag, protocol)
    assert image.endswith("llm-d-routing-sidecar" if tag == "v0.8.0" else "llm-d-router-disagg-sidecar")
    vllm_connector, roles = VLLM_SPEAKS[protocol]
    for role in ("prefill", "decode"):
        vllm = container(by_name(children, "Deployment", f"p-{role}"))
        pd = _pd_connector(vllm)
        pd.pop("kv_connector_extra_config", None)  # the transport: test_operator_mooncake_transport.py
        assert pd == {"kv_connector": vllm_connector, "kv_role": roles[role]}, role
        if vllm_connector == "MooncakeConnector":  # the sidecar asks the prefiller's bootstrap server
            assert env(vllm)["VLLM_MOONCAKE_BOOTSTRAP_PORT"] == args["mooncake-bootstrap-port"] == "8998"
        else:
            assert "mooncake-bootstrap-port" not in args


def test_mooncake_with_a_sidecar_that_cannot_speak_it_is_refused() -> None:
    with pytest.raises(InvalidSpecError) as err:
        parse_spec(_pd("mooncake", tag="v0.8.0"))
    message = str(err.value)
    assert "pdConnector=mooncake" in message and "--kv-connector=mooncake" in message
    assert "v0.9.0" in message and "tag=v0.8.0" in message
    # a release that speaks it, or a tag that names no release (a private build), renders
    for tag in ("v0.9.0", "v0.10.0-rc.1", "sha-0123abc"):
        sidecar = container(
            by_name(render(_pd("mooncake", tag=tag)), "Deployment", "p-decode"), "routing-sidecar"
        )
        assert "--kv-connector=mooncake" in sidecar["args"]
    parse_spec(_pd("nixl", tag="v0.8.0"))


def test_sidecar_images_and_flags_follow_the_release() -> None:
    assert sidecar_image("nixl", None, None) == "ghcr.io/llm-d/llm-d-routing-sidecar:v0.8.0"
    assert sidecar_image("mooncake", None, None) == "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.10.0"
    assert sidecar_image("nixl", None, "v0.10.0") == "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.10.0"
    assert sidecar_image("nixl", "reg.example.com/sidecar", "dev") == "reg.example.com/sidecar:dev"
    assert connector_args("nixl", "v0.6.0") == ["--connector=nixlv2"]  # --kv-connector came in v0.7.0
    assert connector_args("nixl", None) == ["--kv-connector=nixlv2"]
    assert sidecar_version("v0.10.0-rc.1") == (0, 10, 0) and sidecar_version("latest") is None
