"""Envoy + the real `smetric-epp` process in front of given engines (the emulator or real vLLM), for
the agent-API tests: the SDKs talk to Envoy, the picker routes, its Prometheus series are read back."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from pathlib import Path

import aiohttp
import yaml
from prometheus_client.parser import text_string_to_metric_families

from smetric.emulator.ports import free_port_block
from smetric.epp.envoy import EnvoyOptions, EnvoyProcess, bootstrap, free_port
from smetric.epp.obs.health import wait_serving
from tests.support.childproc import spawn, stop


@dataclass(frozen=True)
class Stack:
    url: str  # Envoy's listener
    metrics_url: str  # the picker's /metrics


@dataclass(frozen=True)
class Engine:
    address: str  # host:port of its HTTP API
    kv_events: str  # tcp://host:port of its ZMQ PUB socket ("" = none)


@asynccontextmanager
async def emulated_engines(
    n: int, model: str, time_scale: float
) -> AsyncIterator[tuple[asyncio.subprocess.Process, int, list[Engine]]]:
    """``smetric emulate`` with ``n`` engines (KV events on, hash seed 0, 8192-token context), ready:
    (its process, the first engine's port, the engines); stopped on exit."""
    port, kv_port = free_port_block(n), free_port_block(n)
    emu = await spawn(
        "-m", "smetric.core.cli", "emulate", "--instances", str(n), "--port", str(port),
        "--kv-events-port", str(kv_port), "--time-scale", str(time_scale), "--model", model,
        "--hash-seed", "0", "--max-model-len", "8192",
    )  # fmt: skip
    try:
        assert emu.stdout is not None
        line = await asyncio.wait_for(emu.stdout.readline(), 60)
        assert b"ready" in line, line
        yield emu, port, [Engine(f"127.0.0.1:{port + i}", f"tcp://127.0.0.1:{kv_port + i}") for i in range(n)]
    finally:
        await stop(emu)


@asynccontextmanager
async def picker_stack(
    tmp_path: Path,
    engines: Sequence[Engine],
    *,
    hash_seed: str = "0",
    block_size: int = 0,
    tokenizer: str = "",
    response_path: str = "inline",
    pool: bool = False,
) -> AsyncIterator[Stack]:
    """Picker (precise index, the smetric policy) and Envoy; stops both (picker exit 0 checked).
    ``pool``: Envoy's pool cluster (override_host over the engines, retries on the picker's
    fallbacks) instead of the ORIGINAL_DST cluster."""
    endpoints = tmp_path / "endpoints.yaml"
    entries = [{"address": e.address, **({"kv_events": e.kv_events} if e.kv_events else {})} for e in engines]
    endpoints.write_text(yaml.safe_dump(entries))
    config = tmp_path / "picker.yaml"
    config.write_text(yaml.safe_dump({"policy": {"name": "smetric"}}))
    grpc_port, health_port, metrics_port = free_port(), free_port(), free_port()
    args = ["-m", "smetric.epp.main", "--endpoints", f"@{endpoints}", "--prefix-index", "precise",
            "--config", str(config), "--hash-seed", hash_seed, "--grpc-port", str(grpc_port),
            "--grpc-health-port", str(health_port), "--metrics-port", str(metrics_port),
            "--log-level", "warning", "--response-path", response_path, "--secure-serving=false"]  # fmt: skip
    if block_size:
        args += ["--block-size", str(block_size)]
    if tokenizer:
        args += ["--tokenizer", tokenizer]
    epp = await spawn(*args, log=str(tmp_path / "epp.log"))
    opts = EnvoyOptions(
        listen_port=free_port(),
        admin_port=free_port(),
        picker_port=grpc_port,
        response_path=response_path,  # type: ignore[arg-type]
        pool_endpoints=tuple(e.address for e in engines) if pool else (),
    )
    envoy = EnvoyProcess(bootstrap(opts))
    try:
        await wait_serving(f"127.0.0.1:{health_port}", 60.0)
        await envoy.start()
        yield Stack(f"http://127.0.0.1:{opts.listen_port}", f"http://127.0.0.1:{metrics_port}/metrics")
    finally:
        await envoy.stop()
        await stop(epp)
    assert epp.returncode == 0, (tmp_path / "epp.log").read_text()[-2000:]


async def samples(url: str, name: str) -> dict[tuple[tuple[str, str], ...], float]:
    """One metric's samples from a Prometheus endpoint, keyed by their sorted labels."""
    async with aiohttp.ClientSession() as http, http.get(url) as r:
        text = await r.text()
    out = {}
    for family in text_string_to_metric_families(text):
        for s in family.samples:
            if s.name == name:
                out[tuple(sorted(s.labels.items()))] = s.value
    return out


async def usage_tokens(stack: Stack) -> dict[str, float]:
    """The picker's ``smetric_epp_usage_tokens_total`` by kind (prompt, completion, cached)."""
    found = await samples(stack.metrics_url, "smetric_epp_usage_tokens_total")
    return {dict(k)["kind"]: v for k, v in found.items()}


async def total(url: str, name: str) -> float:
    return sum((await samples(url, name)).values())
