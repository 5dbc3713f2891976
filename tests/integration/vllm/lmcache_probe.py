"""Runs inside the vLLM tier's venv (``install_vllm_tier.sh`` adds LMCache and the Mooncake wheel):
what imports there, which KV connector classes vLLM resolves, and how LMCache's own loaders read
the operator's rendered LMCache settings. Reads a JSON request on stdin, prints one JSON line.

    .venv-vllm/bin/python tests/integration/vllm/lmcache_probe.py main < request.json
    PYTHONPATH=.venv-vllm/mooncake .venv-vllm/bin/python tests/integration/vllm/lmcache_probe.py mooncake

``main``: imports, connector classes, the sync path's LMCache file (``LMCACHE_CONFIG_FILE``, read by
``lmcache_get_or_create_config`` as ``LMCacheConnectorV1Impl`` does) and the async path's
``lmcache.mp.*`` extra config (the LMCache server command the connector would start, parsed by that
server's own argument parser). ``mooncake``: the Mooncake wheel's imports (it lies outside the
venv's site-packages: see ``install_vllm_tier.sh``) and what they do to LMCache's MP modules.
Test: tests/integration/vllm/test_lmcache_imports.py.
"""

from __future__ import annotations

import asyncio
import importlib
import json
import os
import sys
import tempfile
from typing import Any

MAIN_IMPORTS = (
    "lmcache",
    "lmcache.v1.config",
    # vllm/distributed/kv_transfer/kv_connector/v1/lmcache_connector.py 102-104 (vLLM 0.32.0)
    "lmcache.integration.vllm.vllm_v1_adapter",
    # vllm/distributed/kv_transfer/kv_connector/v1/lmcache_mp_connector.py 1199-1201
    "lmcache.integration.vllm.lmcache_mp_connector",
    "lmcache.integration.vllm.mp_server_launcher",
    "lmcache.v1.multiprocess.http_server",
    "lmcache.v1.storage_backend.connector.mooncakestore_connector",
    "lmcache.v1.distributed.l2_adapters.mooncake_store_l2_adapter",
    # LMCache's compiled extensions: CPU ones, the CUDA kernels, the mooncake_store L2 extension
    "lmcache.lmcache_native",
    "lmcache.cuda_ops",
    "lmcache.lmcache_mooncake",
)
MOONCAKE_IMPORTS = (
    "mooncake",
    "mooncake.mooncake_config",
    "mooncake.engine",  # vLLM's MooncakeConnector and LMCache's transfer channel
    "mooncake.store",  # LMCache's mooncakestore:// backend (mooncakestore_connector.py 336-339)
)


def _try_import(name: str) -> str:
    try:
        importlib.import_module(name)
    except Exception as e:  # the report names every failure, whatever its kind
        return f"{type(e).__name__}: {e}"
    return "ok"


def _connector(name: str) -> dict[str, Any]:
    from vllm.distributed.kv_transfer.kv_connector.factory import KVConnectorFactory

    try:
        cls = KVConnectorFactory.get_connector_class_by_name(name)
    except Exception as e:
        chain: list[str] = []  # the error, then the ones it was raised while handling
        cause: BaseException | None = e
        while cause is not None and len(chain) < 5:
            chain.append(f"{type(cause).__name__}: {cause}")
            cause = cause.__context__
        return {"error": chain[0], "chain": chain}
    return {"module": cls.__module__, "qualname": cls.__qualname__}


def _jsonable(value: Any) -> Any:
    return json.loads(json.dumps(value, default=str))


def _lmcache_file(text: str) -> dict[str, Any]:
    """What ``LMCacheConnectorV1Impl`` makes of the file: ``lmcache_get_or_create_config`` (from
    ``LMCACHE_CONFIG_FILE``), Mooncake's setup dict and the remote adapter of ``remote_url``."""
    import lmcache.integration.vllm.utils as lmutils
    from lmcache.v1.storage_backend.connector import ConnectorManager
    from lmcache.v1.storage_backend.connector.mooncakestore_connector import MooncakeStoreConfig

    with tempfile.NamedTemporaryFile("w", suffix=".yaml", delete=False) as f:
        f.write(text)
    try:
        os.environ["LMCACHE_CONFIG_FILE"] = f.name
        lmutils._config_instance = None  # the loader's singleton: one file per call here
        try:
            config = lmutils.lmcache_get_or_create_config()
        except Exception as e:
            return {"error": f"{type(e).__name__}: {e}"}
    finally:
        os.unlink(f.name)
        os.environ.pop("LMCACHE_CONFIG_FILE", None)
    user_set = sorted(getattr(config, "_user_set_keys", set()))
    out: dict[str, Any] = {
        "user_set_keys": user_set,
        "values": _jsonable({k: getattr(config, k) for k in user_set}),
        "mooncake_setup": MooncakeStoreConfig.load_from_lmcache_config(config).setup_config,
    }
    loop = asyncio.new_event_loop()
    try:
        manager = ConnectorManager(config.remote_url, loop, None, config)
        out["remote_adapters"] = sorted(
            type(a).__name__ for a in manager.adapters if a.can_parse(config.remote_url)
        )
    finally:
        loop.close()
    return out


def _mp_server(extra: dict[str, Any]) -> dict[str, Any]:
    """The LMCache server ``LMCacheMPConnector`` auto-starts, parsed as that server parses it."""
    from lmcache.integration.vllm.lmcache_mp_connector import _ensure_transport_scheme
    from lmcache.integration.vllm.mp_server_launcher import _build_autostart_config_from_url
    from lmcache.v1.distributed.config import parse_args_to_config
    from lmcache.v1.multiprocess import http_server

    try:
        # the connector's server URL (lmcache/integration/vllm/lmcache_mp_connector.py 639-649)
        host = extra.get("lmcache.mp.host", "tcp://localhost")
        url = _ensure_transport_scheme(f"{host}:{extra.get('lmcache.mp.port', 5555)}")
        auto = _build_autostart_config_from_url(extra_config=extra, server_url=url)
        command = auto.command()
        # the server's own parser (lmcache/v1/multiprocess/http_server.py 263-273) on its argv
        argv, sys.argv = sys.argv, [command[2], *command[3:]]
        try:
            args = http_server.parse_args()
        finally:
            sys.argv = argv
        storage = parse_args_to_config(args)
        mp = http_server.parse_args_to_mp_server_config(args)
    except (Exception, SystemExit) as e:  # argparse exits on an unknown option
        return {"error": f"{type(e).__name__}: {e}"}
    adapters = storage.l2_adapter_config.adapters
    return {
        "enabled": auto.enabled,
        "module": command[2],
        "host": auto.host,
        "port": auto.port,
        "chunk_size": mp.chunk_size,
        "l2": [{"class": type(a).__name__, "setup_config": dict(a.setup_config)} for a in adapters],
    }


def main() -> None:
    mode = sys.argv[1]
    request = json.load(sys.stdin)
    if mode == "main":
        answer: dict[str, Any] = {
            "imports": {m: _try_import(m) for m in MAIN_IMPORTS},
            "connectors": {n: _connector(n) for n in request["connectors"]},
            "lmcache_files": [_lmcache_file(t) for t in request["lmcache_files"]],
            "mp_servers": [_mp_server(x) for x in request["mp_extra_configs"]],
        }
    else:
        # first, in a fresh interpreter as in an engine: a failed import leaves half-imported
        # LMCache modules behind that a second attempt would find
        answer = {"vllm_lmcache_mp_connector": _connector("LMCacheMPConnector")}
        answer["imports"] = {m: _try_import(m) for m in MOONCAKE_IMPORTS}
        import mooncake

        answer["mooncake_file"] = mooncake.__file__
        answer["vllm_mooncake_connector"] = _connector("MooncakeConnector")
        from vllm.distributed.kv_transfer.kv_connector.v1.mooncake import mooncake_connector

        # vLLM's MooncakeConnector module falls back to None when mooncake.engine fails (79-87)
        answer["vllm_transfer_engine"] = repr(mooncake_connector.TransferEngine)
    print(json.dumps(answer))


if __name__ == "__main__":
    main()
