"""globalKV.loadMode: the LMCache connector the engines get (sync LMCacheConnectorV1, async
LMCacheMPConnector with its LMCache server), and the refusal while the pinned image lacks the
server's Mooncake L2 adapter."""

from __future__ import annotations

import json
import re
import shlex
from typing import Any

import pytest

from smetric.operator.spec import InvalidSpecError, parse_spec
from smetric.operator.spec_rules import ASYNC_LOAD_NEEDS_MOONCAKE_L2, CEL_RULES
from tests.support.operator_render import (
    POOL,
    ROOT,
    VARIANTS,
    by_name,
    container,
    flag,
    render,
    spec,
    validate,
)
from tests.support.operator_spec import minimal, validate_with_crd

ASYNC = {"enabled": True, "loadMode": "async", "lmcache": {"mooncakeL2Adapter": True}}


def transfer(children: list[dict[str, Any]], deployment: str) -> dict[str, Any]:
    return json.loads(
        flag(container(by_name(children, "Deployment", deployment))["args"], "--kv-transfer-config")
    )


def test_sync_is_the_default_and_renders_lmcache_connector_v1() -> None:
    raw = spec(globalKV={"enabled": True})
    assert parse_spec(raw).global_kv.load_mode == "sync"
    assert transfer(render(raw), "p-prefill-decode") == {
        "kv_connector": "LMCacheConnectorV1",
        "kv_role": "kv_both",
    }


def test_async_is_refused_while_the_image_lacks_the_mooncake_l2_adapter() -> None:
    with pytest.raises(InvalidSpecError, match="mooncakeL2Adapter=true"):
        parse_spec(spec(globalKV={"enabled": True, "loadMode": "async"}))
    parse_spec(spec(globalKV={"enabled": False, "loadMode": "async"}))  # no tier: nothing to load
    # the API server refuses the same CR (one CEL rule with the same message; evaluated with the
    # CRD in test_operator_spec) and accepts it with the adapter declared
    assert ASYNC_LOAD_NEEDS_MOONCAKE_L2 in {m for _, m in CEL_RULES}
    assert validate_with_crd(minimal(globalKV=ASYNC)) == []


def test_the_refusal_names_the_version_the_image_pins() -> None:
    dockerfile = (ROOT / "images" / "engine-lmcache.Dockerfile").read_text(encoding="utf-8")
    (pinned,) = re.findall(r"^ARG LMCACHE_VERSION=(\S+)$", dockerfile, flags=re.M)
    assert f"lmcache {pinned}" in ASYNC_LOAD_NEEDS_MOONCAKE_L2


def test_async_renders_lmcache_mp_connector_with_its_server() -> None:
    children = render(spec(globalKV=ASYNC))
    t = transfer(children, "p-prefill-decode")
    extra = t.pop("kv_connector_extra_config")
    assert t == {"kv_connector": "LMCacheMPConnector", "kv_role": "kv_both"}
    assert extra["lmcache.mp.host"] == "tcp://localhost" and extra["lmcache.mp.port"] == 5555
    assert extra["lmcache.mp.autostart"] is True  # the connector starts the server in the container
    args = shlex.split(extra["lmcache.mp.autostart.server_args"])
    assert flag(args, "--chunk-size") == "256" and flag(args, "--l1-size-gb") == "5.0"
    assert flag(args, "--eviction-policy") == "LRU"  # LMCache 0.5.6 refuses an L1 without one
    l2 = json.loads(flag(args, "--l2-adapter"))
    host = POOL.mooncake_host()
    assert l2 == {
        "type": "mooncake_store",
        "local_hostname": "$(POD_IP)",
        "metadata_server": f"http://{host}:8080/metadata",
        "master_server_address": f"{host}:50051",
        "protocol": "tcp",
        "device_name": "",
        "global_segment_size": str(32 * 2**30),
        "local_buffer_size": str(2 * 2**30),
    }
    for child in children:
        validate(child)


def test_async_with_pd_puts_the_mp_connector_in_the_multiconnector() -> None:
    raw = dict(VARIANTS["disaggregated-mooncake-global-kv"])
    raw["globalKV"] = {**raw["globalKV"], "loadMode": "async", "lmcache": {"mooncakeL2Adapter": True}}
    for name in ("p-prefill", "p-decode"):
        connectors = transfer(render(raw), name)["kv_connector_extra_config"]["connectors"]
        assert connectors[1]["kv_connector"] == "LMCacheMPConnector"
