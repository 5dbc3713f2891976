"""The global KV tier's Python packages (images/engine-lmcache.Dockerfile: LMCache 0.5.6 and the
Mooncake transfer engine 0.3.13.post1, CUDA 13 wheel) in the vLLM tier's venv beside vLLM 0.32.0
on the CPU: what imports, what cannot without CUDA and why, whether vLLM resolves every connector
the operator renders, and whether LMCache's own loaders read the operator's rendered settings.

``install_vllm_tier.sh`` installs both packages without their dependencies (torch stays the CPU
build); the Mooncake wheel lies in ``$SMETRIC_VLLM_VENV/mooncake``, off the venv's path, added for
:func:`test_mooncake_wheel_without_cuda` only. The probe (``lmcache_probe.py``) runs in the venv;
a missing venv skips with the install command.
"""

from __future__ import annotations

import json
import os
import re
import shlex
import subprocess
import tomllib
import typing
from collections.abc import Iterator
from functools import cache
from pathlib import Path
from typing import Any

import pytest
import yaml

from smetric.operator.render_kv import LMCACHE_CONFIG_DIR
from smetric.operator.spec import TopologySpec
from tests.support.operator_render import VARIANTS, container, flag, render, spec
from tests.support.vllm_tier import VENV, tier_python

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

ROOT = Path(__file__).parents[3]
HERE = Path(__file__).parent
PROBE = HERE / "lmcache_probe.py"
POD_IP = "10.0.0.7"
ASYNC = {"enabled": True, "loadMode": "async", "lmcache": {"mooncakeL2Adapter": True}}
# A key LMCache 0.5.6 does not know (its own is save_unfull_chunk): the file check must notice it.
UNKNOWN_KEY = "save_unfull_chunks"
# What the engine image supplies for the extensions' NEEDED libraries (images/native-deps.toml):
# the base image's CUDA runtime and torch, apt packages, and the driver the GPU runtime mounts.
CUDA_RUNTIME = {"libcudart.so.13", "libc10_cuda.so", "libtorch_cuda.so"}
IMAGE_SUPPLIED = CUDA_RUNTIME | {
    "libcuda.so.1",
    "libibverbs.so.1",
    "libmlx5.so.1",
    "libnuma.so.1",
    "libcurl.so.4",
}
MISSING_LIBRARY = re.compile(r"^ImportError: (\S+): cannot open shared object file")


def _probe(mode: str, request: dict[str, Any], pythonpath: str | None = None) -> dict[str, Any]:
    env = {k: v for k, v in os.environ.items() if not k.startswith(("LMCACHE_", "PYTHONPATH"))}
    if pythonpath is not None:
        env["PYTHONPATH"] = pythonpath
    result = subprocess.run(
        [str(tier_python()), str(PROBE), mode],
        input=json.dumps(request),
        capture_output=True,
        text=True,
        timeout=600,
        env=env,
        cwd=HERE,
    )
    assert result.returncode == 0, result.stderr[-3000:]
    answer: dict[str, Any] = json.loads(result.stdout.strip().splitlines()[-1])
    return answer


def _lmcache_file(deployment: dict[str, Any], tmp: Path) -> str:
    """The LMCache file the engine container's launcher writes, by running that launcher with
    ``/bin/sh`` (its heredoc expands ``${POD_IP}``) into ``tmp`` instead of /etc/lmcache."""
    command = container(deployment)["command"]
    assert command[:2] == ["/bin/sh", "-c"]
    script = command[2].replace(LMCACHE_CONFIG_DIR, str(tmp))
    subprocess.run(
        ["/bin/sh", "-c", script, "engine", "true"],
        check=True,
        timeout=30,
        env={"PATH": os.environ["PATH"], "POD_IP": POD_IP},
    )
    return (tmp / "lmcache.yaml").read_text()


def _engines(children: list[dict[str, Any]]) -> Iterator[dict[str, Any]]:
    """The Deployments that run a vLLM engine (a container named ``vllm``)."""
    for child in children:
        if child["kind"] == "Deployment":
            pod = child["spec"]["template"]["spec"]
            if any(c["name"] == "vllm" for c in pod["containers"]):
                yield child


def _transfer_config(engine: dict[str, Any]) -> dict[str, Any] | None:
    args = container(engine).get("args", [])
    if "--kv-transfer-config" not in args:
        return None
    # the kubelet expands $(POD_IP) in args
    config: dict[str, Any] = json.loads(flag(args, "--kv-transfer-config").replace("$(POD_IP)", POD_IP))
    return config


def _connector_entries(config: dict[str, Any]) -> list[dict[str, Any]]:
    return [config, *(config.get("kv_connector_extra_config") or {}).get("connectors", [])]


def _renders() -> list[list[dict[str, Any]]]:
    pools = [render(VARIANTS["colocated-global-kv-rdma"])]
    for global_kv in ({"enabled": False}, {"enabled": True}, ASYNC):
        pools.append(render(spec(globalKV=global_kv)))
        for connector in typing.get_args(TopologySpec.model_fields["pd_connector"].annotation):
            topology = {
                "mode": "disaggregated",
                "prefill": {"replicas": 1},
                "decode": {"replicas": 1},
                "pdConnector": connector,
            }
            pools.append(render(spec(topology=topology, globalKV=global_kv)))
    return pools


def _request(tmp: Path) -> dict[str, Any]:
    connectors: set[str] = set()
    files: list[str] = []
    mp: list[dict[str, Any]] = []
    for children in _renders():
        for engine in _engines(children):
            config = _transfer_config(engine)
            for entry in _connector_entries(config) if config else []:
                connectors.add(entry["kv_connector"])
                if entry["kv_connector"] == "LMCacheMPConnector":
                    mp.append(entry["kv_connector_extra_config"])
            if container(engine)["command"][:2] == ["/bin/sh", "-c"]:
                out = tmp / str(len(list(tmp.iterdir())))
                out.mkdir()
                text = _lmcache_file(engine, out)
                files += [text] if text not in files else []
    assert len(files) >= 2 and len(mp) >= 3, (files, mp)  # tcp and rdma; colocated and P/D
    files.append(files[0] + f"{UNKNOWN_KEY}: false\n")  # the check's own negative, the last file
    return {"connectors": sorted(connectors), "lmcache_files": files, "mp_extra_configs": mp}


@pytest.fixture(scope="module")
def request_(tmp_path_factory: pytest.TempPathFactory) -> dict[str, Any]:
    return _request(tmp_path_factory.mktemp("lmcache"))


@pytest.fixture(scope="module")
def main_probe(request_: dict[str, Any]) -> dict[str, Any]:
    has_lmcache = subprocess.run(
        [
            str(tier_python()),
            "-c",
            "import importlib.util as u, sys; sys.exit(u.find_spec('lmcache') is None)",
        ],
        timeout=60,
    )
    if has_lmcache.returncode != 0:
        pytest.skip(
            f"no LMCache in {VENV} (a venv from before install_vllm_tier.sh added it: run that again)"
        )
    return _probe("main", request_)


@cache
def _needed(wheel_prefix: str, file_prefix: str) -> set[str]:
    """NEEDED entries of a wheel's extension as images/native-needed.json records them (cp312)."""
    wheels = json.loads((ROOT / "images" / "native-needed.json").read_text())["wheels"]
    (files,) = [w["files"] for name, w in wheels.items() if name.startswith(wheel_prefix + "==")]
    (needed,) = [f["needed"] for path, f in files.items() if path.startswith(file_prefix)]
    return set(needed)


def _missing_library(error: str) -> str:
    match = MISSING_LIBRARY.match(error)
    assert match, error
    return match.group(1)


def lmcache_file_problems(text: str, parsed: dict[str, Any]) -> list[str]:
    """How LMCache's reading of a rendered LMCache file differs from the file: LMCache 0.5.6 only
    logs an unknown key and goes on (lmcache/v1/config_base.py 209-212), so every key must be
    among the keys it marks user-set, with the value it parsed."""
    if "error" in parsed:
        return [parsed["error"]]
    rendered = yaml.safe_load(text)
    problems = [f"LMCache ignores {k!r}" for k in sorted(set(rendered) - set(parsed["user_set_keys"]))]
    problems += [
        f"{k}: rendered {v!r}, LMCache read {parsed['values'][k]!r}"
        for k, v in rendered.items()
        if k in parsed["values"] and parsed["values"][k] != v
    ]
    # LMCache's Mooncake backend forwards only the setup keys it knows (mooncakestore_connector.py
    # 238-279): every extra_config key must arrive, as a string
    forwarded = {k: str(v) for k, v in rendered.get("extra_config", {}).items()}
    if parsed["mooncake_setup"] != forwarded:
        problems.append(f"Mooncake setup {parsed['mooncake_setup']} != extra_config {forwarded}")
    if parsed["remote_adapters"] != ["MooncakestoreConnectorAdapter"]:
        problems.append(f"remote_url taken by {parsed['remote_adapters']}")
    return problems


def test_installed_versions_are_the_images() -> None:
    script = (HERE / "install_vllm_tier.sh").read_text()
    dockerfile = (ROOT / "images" / "engine-lmcache.Dockerfile").read_text()
    for arg in ("LMCACHE_VERSION", "MOONCAKE_VERSION"):
        (pinned,) = re.findall(rf"^ARG {arg}=(\S+)$", dockerfile, re.M)
        assert re.search(rf"^{arg}={re.escape(pinned)}\s", script, re.M), arg
    assert "mooncake-transfer-engine-cuda13==" in script and "mooncake-transfer-engine-cuda13==" in dockerfile
    toml = tomllib.loads((ROOT / "images" / "native-deps.toml").read_text())
    assert {"libcudart.so.13", "libc10_cuda.so", "libtorch_cuda.so"} <= set(
        toml["base"]["vllm/vllm-openai:v0.32.0"]["sonames"]
    )
    assert toml["base"]["vllm/vllm-openai:v0.32.0"]["gpu_runtime"] == ["libcuda.so.1"]


def test_lmcache_and_its_vllm_adapters_import_on_cpu(main_probe: dict[str, Any]) -> None:
    imports = main_probe["imports"]
    cpu = [m for m in imports if m not in ("lmcache.cuda_ops", "lmcache.lmcache_mooncake")]
    assert {m: imports[m] for m in cpu} == {m: "ok" for m in cpu}


def test_cuda_extensions_fail_with_the_missing_library(main_probe: dict[str, Any]) -> None:
    """``lmcache.cuda_ops`` needs the CUDA runtime and torch's CUDA libraries (the tier's torch is
    2.13.0+cpu); the loader names the first one it cannot find. The PyPI wheel has no
    ``lmcache.lmcache_mooncake`` (the async path's mooncake_store L2 adapter: ASYNC_LOAD_NEEDS_MOONCAKE_L2)."""
    missing = _missing_library(main_probe["imports"]["lmcache.cuda_ops"])
    assert missing in CUDA_RUNTIME & _needed("lmcache", "lmcache/cuda_ops"), missing
    assert main_probe["imports"]["lmcache.lmcache_mooncake"] == (
        "ModuleNotFoundError: No module named 'lmcache.lmcache_mooncake'"
    )
    lmcache_files = json.loads((ROOT / "images" / "native-needed.json").read_text())["wheels"][
        "lmcache==0.5.6"
    ]
    assert not [f for f in lmcache_files["files"] if "lmcache_mooncake" in f]


def test_vllm_resolves_every_rendered_connector(request_: dict[str, Any], main_probe: dict[str, Any]) -> None:
    """Each ``kv_connector`` the operator renders (pdConnector x globalKV off/sync/async) names a
    class vLLM 0.32's KVConnectorFactory loads (factory.py 78-95: the registry's lazy loader),
    without instantiating it; LMCacheMPConnector is LMCache's own (the render's docs cite it), not
    vLLM's fallback (lmcache_mp_connector.py 1191-1217)."""
    assert set(request_["connectors"]) == {
        "LMCacheConnectorV1",
        "LMCacheMPConnector",
        "MooncakeConnector",
        "MultiConnector",
        "NixlConnector",
    }
    resolved = main_probe["connectors"]
    assert all("module" in c for c in resolved.values()), resolved
    assert resolved["LMCacheMPConnector"]["module"] == "lmcache.integration.vllm.lmcache_mp_connector"
    assert resolved["LMCacheConnectorV1"]["module"].startswith("vllm.distributed.kv_transfer.")


def test_rendered_lmcache_file_is_read_by_lmcache(
    request_: dict[str, Any], main_probe: dict[str, Any]
) -> None:
    """The sync path's file (written by the engine container's launcher, tcp and rdma pools), read
    by ``lmcache_get_or_create_config`` from ``LMCACHE_CONFIG_FILE`` as LMCacheConnectorV1's
    adapter does (vllm_v1_adapter.py 466): every key known with its value, every Mooncake setup key
    forwarded, ``remote_url`` taken by the mooncakestore adapter."""
    files, parsed = request_["lmcache_files"][:-1], main_probe["lmcache_files"][:-1]
    for text, answer in zip(files, parsed, strict=True):
        assert lmcache_file_problems(text, answer) == [], text


def test_lmcache_file_check_notices_an_unknown_key(
    request_: dict[str, Any], main_probe: dict[str, Any]
) -> None:
    text, answer = request_["lmcache_files"][-1], main_probe["lmcache_files"][-1]
    assert UNKNOWN_KEY not in answer["user_set_keys"]  # LMCache itself only logs it
    assert lmcache_file_problems(text, answer) == [f"LMCache ignores {UNKNOWN_KEY!r}"]


def test_async_server_args_parse_as_lmcache_server(
    main_probe: dict[str, Any], request_: dict[str, Any]
) -> None:
    """The LMCache server LMCacheMPConnector would auto-start (colocated and inside the P/D
    MultiConnector), parsed by that server's own parser and ``parse_args_to_config``."""
    for extra, server in zip(request_["mp_extra_configs"], main_probe["mp_servers"], strict=True):
        assert "error" not in server, server
        args = shlex.split(extra["lmcache.mp.autostart.server_args"])
        l2 = json.loads(flag(args, "--l2-adapter"))
        assert server["enabled"] and server["module"] == "lmcache.v1.multiprocess.http_server"
        assert (server["host"], server["port"]) == ("localhost", 5555)
        assert server["chunk_size"] == int(flag(args, "--chunk-size"))
        assert server["l2"] == [
            {
                "class": "MooncakeStoreL2AdapterConfig",
                "setup_config": {k: v for k, v in l2.items() if k != "type"},
            }
        ]
        assert server["l2"][0]["setup_config"]["local_hostname"] == POD_IP


def test_mooncake_wheel_without_cuda() -> None:
    """The Mooncake wheel's Python package imports; its extensions need libraries only the engine
    image (apt: libibverbs1, ibverbs-providers) and a GPU pod (libcuda.so.1) supply. Where they are
    missing, vLLM's MooncakeConnector module keeps ``TransferEngine = None`` (mooncake_connector.py
    79-87), and LMCacheMPConnector cannot be resolved at all: LMCache 0.5.6 skips its Mooncake
    transfer channel only when ``mooncake`` is absent (transfer_channel/impl/__init__.py 11-18),
    vLLM falls back to its built-in adapter, which imports a name LMCache 0.5.6 no longer has."""
    target = VENV / "mooncake"
    if not (target / "mooncake").is_dir():
        pytest.skip(f"no Mooncake wheel in {target} (install_vllm_tier.sh puts it there)")
    answer = _probe("mooncake", {}, pythonpath=str(target))
    assert Path(answer["mooncake_file"]).is_relative_to(target)
    imports = answer["imports"]
    assert imports["mooncake"] == imports["mooncake.mooncake_config"] == "ok"
    assert answer["vllm_mooncake_connector"]["qualname"] == "MooncakeConnector"
    if imports["mooncake.engine"] == "ok":  # a machine with the image's libraries and a GPU driver
        assert answer["vllm_transfer_engine"] != "None"
        assert (
            answer["vllm_lmcache_mp_connector"]["module"] == "lmcache.integration.vllm.lmcache_mp_connector"
        )
        return
    for module, so in (("mooncake.engine", "mooncake/engine.so"), ("mooncake.store", "mooncake/store.so")):
        missing = _missing_library(imports[module])
        assert missing in IMAGE_SUPPLIED & _needed("mooncake-transfer-engine-cuda13", so), (module, missing)
    assert answer["vllm_transfer_engine"] == "None"
    chain = answer["vllm_lmcache_mp_connector"]["chain"]
    assert "cannot import name 'CudaIPCWrapper'" in chain[0]
    assert _missing_library(chain[1]) == _missing_library(imports["mooncake.engine"])
