"""``smetric emulate``: serve N emulated vLLM instances on consecutive ports (GPU-free backend)."""

from __future__ import annotations

import argparse
import asyncio
import contextlib
import signal
import sys
from collections.abc import Sequence

from smetric.core.argparsing import OneLineErrors
from smetric.core.presets import PRESETS
from smetric.emulator.cluster import start_cluster
from smetric.emulator.config import EmulatorConfig
from smetric.engine import GLOBAL_TIER_KINDS
from smetric.engine.global_tier import LOAD_MODES


def _parser() -> argparse.ArgumentParser:
    p = OneLineErrors(
        prog="smetric emulate",
        description="Serve N emulated vLLM 0.32 instances (OpenAI API, /metrics, ZMQ KV events) timed by "
        "the simulator's instance model.",
    )
    p.add_argument("--instances", type=int, default=1, help="number of instances (default 1)")
    p.add_argument("--host", default="127.0.0.1", help="address to bind (HTTP and ZMQ)")
    p.add_argument(
        "--advertise-host",
        default="",
        help="address named in KV-event topics (default --host; the pod IP when binding 0.0.0.0)",
    )
    p.add_argument("--port", type=int, default=8000, help="HTTP port of instance 0; instance i uses port+i")
    p.add_argument(
        "--kv-events-port",
        type=int,
        default=0,
        help="ZMQ PUB port of instance 0 (instance i: +i); 0 disables KV events",
    )
    p.add_argument("--preset", default="qwen3-30b-h20", choices=sorted(PRESETS), help="instance model preset")
    p.add_argument(
        "--time-scale",
        type=float,
        default=1.0,
        help="wall seconds per modelled second (0.1 = ten times faster than the model)",
    )
    p.add_argument("--model", default="", help="served model name (default: the preset's model)")
    p.add_argument("--hash-seed", default="0", help="PYTHONHASHSEED shared with the picker (block hashes)")
    p.add_argument("--block-size", type=int, default=16, help="KV block size in tokens")
    p.add_argument("--kv-capacity-tokens", type=int, default=0, help="GPU KV capacity (0 = preset's)")
    p.add_argument("--max-model-len", type=int, default=0, help="context length (0 = preset model's)")
    p.add_argument("--tokenizer", default="", help="tokenizer.json path (default: shared fallback tokenizer)")
    p.add_argument(
        "--global-tier",
        default="none",
        choices=GLOBAL_TIER_KINDS,
        help="shared global KV tier across this process's instances",
    )
    p.add_argument(
        "--global-load-mode",
        default="sync",
        choices=LOAD_MODES,
        help="sync: a global-tier load stalls the instance's batch (LMCacheConnectorV1, the operator's "
        "default); async: only the request waits (LMCacheMPConnector)",
    )
    p.add_argument(
        "--fail-after",
        type=int,
        default=0,
        help="instances turn dead (503) after this many requests each (0 = never)",
    )
    p.add_argument(
        "--stream-interval-ms",
        type=float,
        default=10.0,
        help="wall-clock flush interval of streamed tokens while decoding",
    )
    p.add_argument(
        "--token-cost-scale",
        type=float,
        default=1.0,
        help="each token stands for this many modelled tokens: time and global-tier bytes are charged "
        "as for the full-size request (>= 1; 1 = off; smetric bench sets 1/token scale)",
    )
    return p


def config_from_args(argv: Sequence[str]) -> EmulatorConfig:
    a = _parser().parse_args(list(argv))
    return EmulatorConfig(
        instances=a.instances,
        host=a.host,
        port=a.port,
        kv_events_port=a.kv_events_port,
        kv_events_host=a.host,
        advertise_host=a.advertise_host,
        preset_name=a.preset,
        time_scale=a.time_scale,
        model=a.model,
        hash_seed=a.hash_seed,
        block_size=a.block_size,
        kv_capacity_tokens=a.kv_capacity_tokens,
        max_model_len=a.max_model_len,
        fail_after=a.fail_after,
        tokenizer=a.tokenizer,
        global_tier=a.global_tier,
        global_load_mode=a.global_load_mode,
        stream_interval_s=a.stream_interval_ms / 1000.0,
        token_cost_scale=a.token_cost_scale,
    )


async def serve(config: EmulatorConfig) -> None:
    cluster = await start_cluster(config)
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGINT, signal.SIGTERM):
        with contextlib.suppress(NotImplementedError):
            loop.add_signal_handler(sig, stop.set)
    last = config.http_port(config.instances - 1)
    kv = f", KV events on {config.kv_events_endpoint(0)}+" if config.kv_events_port else ""
    print(
        f"smetric emulate: {config.instances} x {config.model_name} ({config.preset_name}, "
        f"time scale {config.time_scale}) on http://{config.host}:{config.port}..{last}{kv}; ready",
        flush=True,
    )
    try:
        await stop.wait()
    finally:
        await cluster.stop()


def main(argv: Sequence[str] | None = None) -> int:
    try:
        config = config_from_args(sys.argv[1:] if argv is None else argv)
    except ValueError as exc:
        print(f"smetric emulate: {exc}", file=sys.stderr)
        return 2
    try:
        asyncio.run(serve(config))
    except OSError as exc:  # e.g. a port already in use
        print(f"smetric emulate: {exc}", file=sys.stderr)
        return 1
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
