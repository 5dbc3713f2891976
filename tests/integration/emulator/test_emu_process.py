"""`smetric emulate` as a real subprocess: HTTP with aiohttp, KV events with a real ZMQ SUB."""

from __future__ import annotations

import asyncio
import os
import signal
import sys
from collections.abc import AsyncIterator
from dataclasses import dataclass

import aiohttp
import msgspec
import pytest
import zmq
import zmq.asyncio
from prometheus_client.parser import text_string_to_metric_families

from smetric.core.blockhash import BlockHasher
from smetric.core.tokenizer import FallbackTokenizer
from smetric.emulator.ports import free_port_block

pytestmark = pytest.mark.integration

MODEL = "emu/test-model"
SYSTEM = "You are a coding agent working in a large repository. Follow the tool protocol. " * 12


@dataclass
class Emulator:
    proc: asyncio.subprocess.Process
    port: int
    kv_port: int

    def url(self, path: str, i: int = 0) -> str:
        return f"http://127.0.0.1:{self.port + i}{path}"


@pytest.fixture
async def emulator() -> AsyncIterator[Emulator]:
    port, kv_port = free_port_block(2), free_port_block(2)
    args = ["-m", "smetric.core.cli", "emulate", "--instances", "2", "--port", str(port),
            "--kv-events-port", str(kv_port), "--time-scale", "0.05", "--model", MODEL,
            "--kv-capacity-tokens", "2048", "--hash-seed", "42"]  # fmt: skip
    proc = await asyncio.create_subprocess_exec(
        sys.executable, *args, stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )  # fmt: skip
    assert proc.stdout is not None
    line = await asyncio.wait_for(proc.stdout.readline(), 30)
    assert b"ready" in line, line + (await proc.stderr.read() if proc.stderr else b"")
    yield Emulator(proc, port, kv_port)
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        await asyncio.wait_for(proc.wait(), 10)


async def _events(sub: zmq.asyncio.Socket, until: float = 0.3) -> list[tuple[bytes, int, list[dict]]]:
    out = []
    while await sub.poll(int(until * 1000)):
        topic, seq, payload = await sub.recv_multipart()
        ts, events, dp_rank = msgspec.msgpack.decode(payload)
        assert isinstance(ts, float) and dp_rank == 0
        out.append((topic, int.from_bytes(seq, "big"), events))
    return out


async def _await_subscription(http: aiohttp.ClientSession, reset_url: str, sub: zmq.asyncio.Socket) -> None:
    """PUB/SUB slow joiner: poke the (empty) cache until its AllBlocksCleared reaches us, then drain."""
    for _ in range(100):
        async with http.post(reset_url) as r:
            assert r.status == 200
        if await sub.poll(100):
            break
    else:
        raise AssertionError("the KV-event subscription never came up")
    while await sub.poll(100):
        await sub.recv_multipart()


async def test_real_process_serves_caches_and_publishes(emulator: Emulator) -> None:
    ctx = zmq.asyncio.Context()
    sub = ctx.socket(zmq.SUB)
    sub.setsockopt(zmq.SUBSCRIBE, b"")
    sub.connect(f"tcp://127.0.0.1:{emulator.kv_port}")
    try:
        hasher, tok = BlockHasher(16, "42"), FallbackTokenizer()
        turn1 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "List the files."}]
        async with aiohttp.ClientSession() as http:
            await _await_subscription(http, emulator.url("/reset_prefix_cache"), sub)
            body = {"model": MODEL, "messages": turn1, "max_tokens": 24, "stream": True,
                    "stream_options": {"include_usage": True}}  # fmt: skip
            async with http.post(emulator.url("/v1/chat/completions"), json=body) as r:
                assert r.status == 200 and r.headers["Content-Type"].startswith("text/event-stream")
                raw = await r.read()
            assert raw.endswith(b"data: [DONE]\n\n")
            chunks = [msgspec.json.decode(b[6:]) for b in raw.split(b"\n\n") if b.startswith(b"data: {")]
            answer = "".join(c["choices"][0]["delta"].get("content", "") for c in chunks if c["choices"])
            usage1 = chunks[-1]["usage"]
            assert usage1["completion_tokens"] == 24

            # KV events: BlockStored for the prompt's and the answer's full blocks, with the hashes
            # the picker computes from the same text (shared tokenizer and seed).
            batches = await _events(sub)
            assert batches and all(
                t == f"kv@127.0.0.1:{emulator.port}@{MODEL}".encode() for t, _, _ in batches
            )
            seqs = [s for _, s, _ in batches]
            assert seqs == list(range(seqs[0], seqs[0] + len(seqs)))
            stored = [
                h
                for _, _, evs in batches
                for e in evs
                if e["type"] == "BlockStored"
                for h in e["block_hashes"]
            ]
            expected = hasher.external_hashes(tok.encode(SYSTEM + "List the files." + answer))
            assert stored == expected
            first = batches[0][2][0]
            assert (
                first["parent_block_hash"] is None and first["block_size"] == 16 and first["medium"] == "GPU"
            )
            assert len(first["token_ids"]) == 16 * len(first["block_hashes"])

            # Follow-up turn on the same instance: the previous prompt and answer are cached.
            turn2 = [
                *turn1,
                {"role": "assistant", "content": answer},
                {"role": "user", "content": "Open main.py"},
            ]
            async with http.post(emulator.url("/v1/chat/completions"),
                                 json={"model": MODEL, "messages": turn2, "max_tokens": 4}) as r:  # fmt: skip
                usage2 = (await r.json())["usage"]
            assert usage2["prompt_tokens_details"]["cached_tokens"] > 0
            assert usage2["prompt_tokens_details"]["cached_tokens"] >= len(expected) * 16 - 16

            # A different long prompt on the same instance evicts the session's blocks (2048-token cache).
            other = "unrelated " * 450  # 1800 tokens
            async with http.post(emulator.url("/v1/completions"),
                                 json={"model": MODEL, "prompt": other, "max_tokens": 4}) as r:  # fmt: skip
                assert r.status == 200
            batches = await _events(sub)
            removed = {
                h
                for _, _, evs in batches
                for e in evs
                if e["type"] == "BlockRemoved"
                for h in e["block_hashes"]
            }
            assert removed & set(expected)

            # vLLM's reset endpoint clears the cache and says so with one AllBlocksCleared event.
            async with http.post(emulator.url("/reset_prefix_cache")) as r:
                assert r.status == 200
            batches = await _events(sub)
            assert [e["type"] for _, _, evs in batches for e in evs] == ["AllBlocksCleared"]

            # Metrics of instance 0 parse and carry vLLM's names; instance 1 is untouched.
            async with http.get(emulator.url("/metrics")) as r:
                text = await r.text()
            names = {s.name for f in text_string_to_metric_families(text) for s in f.samples}
            assert {"vllm:num_requests_running", "vllm:kv_cache_usage_perc", "vllm:prefix_cache_hits_total",
                    "vllm:cache_config_info", "vllm:time_to_first_token_seconds_bucket"} <= names  # fmt: skip
            async with http.get(emulator.url("/metrics", 1)) as r:
                samples = {
                    s.name: s.value for f in text_string_to_metric_families(await r.text()) for s in f.samples
                }
            assert samples["vllm:prefix_cache_queries_total"] == 0
            async with http.get(emulator.url("/v1/models", 1)) as r:
                assert (await r.json())["data"][0]["id"] == MODEL
    finally:
        ctx.destroy(linger=0)


async def test_sigterm_stops_cleanly(emulator: Emulator) -> None:
    emulator.proc.send_signal(signal.SIGTERM)
    assert await asyncio.wait_for(emulator.proc.wait(), 10) == 0


async def test_bad_arguments_exit_with_message() -> None:
    proc = await asyncio.create_subprocess_exec(
        sys.executable, "-m", "smetric.core.cli", "emulate", "--time-scale", "0",
        stdout=asyncio.subprocess.PIPE, stderr=asyncio.subprocess.PIPE,
    )  # fmt: skip
    _, err = await asyncio.wait_for(proc.communicate(), 30)
    assert proc.returncode == 2 and b"--time-scale" in err
