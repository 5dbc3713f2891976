"""Mooncake's transport (``globalKV.protocol`` and ``globalKV.deviceNames``) reaches every Mooncake
client the operator renders: vLLM's MooncakeConnector (``pdConnector: mooncake``, alone or inside the
MultiConnector beside the global tier) and LMCache's Mooncake setup (the LMCache file of the sync
path, the ``--l2-adapter`` of the async path).

Facts the tests hold the render to (sources cited in ``render_engine.mooncake_connector_extra_config``
and ``render_kv``): vLLM 0.32.0's MooncakeConnector reads ``mooncake_protocol`` (default ``rdma``)
and ``device_name`` (default ``""``) from its own ``kv_connector_extra_config``; LMCache 0.5.6 passes
``protocol`` and ``device_name`` to Mooncake's ``setup`` (``_LEGACY_PASSTHROUGH_KEYS``, defaults
``tcp`` and ``""``); Mooncake splits ``device_name`` at commas.
"""

from __future__ import annotations

import json
import shlex
from typing import Any

import pytest
import yaml

from smetric.operator.render_kv import lmcache_config_text
from smetric.operator.spec import parse_spec
from tests.support.operator_render import POOL, by_name, container, flag, render, spec, validate

# What vLLM 0.32.0 falls back to when the key is missing (mooncake_connector.py 1202-1207).
VLLM_DEFAULTS = {"mooncake_protocol": "rdma", "device_name": ""}


def _pd(global_kv: dict[str, Any], load_mode: str = "sync") -> dict[str, Any]:
    topology = {
        "mode": "disaggregated",
        "prefill": {"replicas": 1},
        "decode": {"replicas": 1},
        "pdConnector": "mooncake",
    }
    kv = {**global_kv}
    if kv.get("enabled"):
        kv["loadMode"] = load_mode
        if load_mode == "async":
            kv["lmcache"] = {"mooncakeL2Adapter": True}
    return spec(topology=topology, globalKV=kv)


def _connectors(children: list[dict[str, Any]], role: str) -> dict[str, dict[str, Any]]:
    """The role's vLLM connectors by name (a MultiConnector's children flattened)."""
    config = json.loads(
        flag(container(by_name(children, "Deployment", f"p-{role}"))["args"], "--kv-transfer-config")
    )
    if config["kv_connector"] == "MultiConnector":
        return {c["kv_connector"]: c for c in config["kv_connector_extra_config"]["connectors"]}
    return {config["kv_connector"]: config}


def _vllm_reads(connector: dict[str, Any]) -> dict[str, str]:
    """What MooncakeWorker.__init__ passes to TransferEngine.initialize for this config."""
    extra = connector.get("kv_connector_extra_config") or {}
    return {key: extra.get(key, default) for key, default in VLLM_DEFAULTS.items()}


@pytest.mark.parametrize(
    ("global_kv", "want"),
    [
        ({}, {"mooncake_protocol": "tcp", "device_name": ""}),
        ({"enabled": True}, {"mooncake_protocol": "tcp", "device_name": ""}),
        (
            {"enabled": True, "protocol": "rdma", "deviceNames": ["mlx5_0", "mlx5_1"]},
            {"mooncake_protocol": "rdma", "device_name": "mlx5_0,mlx5_1"},
        ),
        ({"protocol": "rdma"}, {"mooncake_protocol": "rdma", "device_name": ""}),
    ],
    ids=["pd-tcp", "pd+tier-tcp", "pd+tier-rdma", "pd-rdma-discover"],
)
def test_mooncake_connector_gets_the_pools_protocol_and_devices(
    global_kv: dict[str, Any], want: dict[str, str]
) -> None:
    children = render(_pd(global_kv))
    for child in children:
        validate(child)
    for role in ("prefill", "decode"):
        mooncake = _connectors(children, role)["MooncakeConnector"]
        assert mooncake["kv_connector_extra_config"] == want, role
        assert _vllm_reads(mooncake) == want, role


def test_a_tcp_pool_never_leaves_vllm_on_its_rdma_default() -> None:
    """The failure the setting exists for: vLLM's MooncakeConnector defaults to rdma, so a TCP pool
    whose connector carries no ``mooncake_protocol`` starts a transfer engine on RDMA."""
    for global_kv in ({}, {"enabled": True}):
        for role in ("prefill", "decode"):
            assert (
                _vllm_reads(_connectors(render(_pd(global_kv)), role)["MooncakeConnector"])[
                    "mooncake_protocol"
                ]
                == "tcp"
            )


@pytest.mark.parametrize("load_mode", ["sync", "async"])
def test_global_tier_and_pd_use_one_mooncake_transport(load_mode: str) -> None:
    kv = {"enabled": True, "protocol": "rdma", "deviceNames": ["mlx5_0", "mlx5_1"]}
    raw = _pd(kv, load_mode)
    children = render(raw)
    for role in ("prefill", "decode"):
        connectors = _connectors(children, role)
        pd = _vllm_reads(connectors["MooncakeConnector"])
        if load_mode == "sync":
            assert "LMCacheConnectorV1" in connectors
            setup = yaml.safe_load(lmcache_config_text(POOL, parse_spec(raw), pod_ip="10.0.0.1"))[
                "extra_config"
            ]
        else:
            extra = connectors["LMCacheMPConnector"]["kv_connector_extra_config"]
            args = shlex.split(extra["lmcache.mp.autostart.server_args"])
            setup = json.loads(args[args.index("--l2-adapter") + 1])
            assert setup["type"] == "mooncake_store"
        assert (setup["protocol"], setup["device_name"]) == (pd["mooncake_protocol"], pd["device_name"])
        assert setup["device_name"] == "mlx5_0,mlx5_1"


def test_nixl_gets_no_mooncake_settings() -> None:
    raw = spec(
        topology={"mode": "disaggregated", "prefill": {"replicas": 1}, "decode": {"replicas": 1}},
        globalKV={"protocol": "rdma"},
    )
    for role in ("prefill", "decode"):
        assert "kv_connector_extra_config" not in _connectors(render(raw), role)["NixlConnector"]
