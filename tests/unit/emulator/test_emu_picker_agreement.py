"""The picker's own decoders read the emulator as they read vLLM: its KV events feed the precise
index so that the index predicts the emulator's ``cached_tokens``, and its metrics parse."""

from __future__ import annotations

import aiohttp
import zmq
import zmq.asyncio

from smetric.core.blockhash import BlockHasher
from smetric.core.tokenizer import FallbackTokenizer
from smetric.emulator.cluster import start_cluster
from smetric.emulator.config import EmulatorConfig
from smetric.emulator.ports import free_port_block
from smetric.epp.index.precise import PreciseIndex
from smetric.epp.kvevents.events import decode_payload
from smetric.epp.kvevents.store import BlockStore
from smetric.epp.scrape.parse import parse_vllm_metrics

MODEL = "m"
SYSTEM = "You are a coding agent. Use the tools to inspect and edit the repository. " * 10


async def test_precise_index_fed_by_emulator_events_predicts_cached_tokens() -> None:
    config = EmulatorConfig(instances=2, port=free_port_block(2), kv_events_port=free_port_block(2),
                            time_scale=0.01, model=MODEL, hash_seed="7")  # fmt: skip
    cluster = await start_cluster(config)
    ctx = zmq.asyncio.Context()
    subs = []
    for i in range(2):
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"")
        sub.connect(config.kv_events_endpoint(i))
        subs.append(sub)
    store = BlockStore()
    index = PreciseIndex(FallbackTokenizer(), BlockHasher(16, "7"), store)
    addrs = [f"127.0.0.1:{config.http_port(i)}" for i in range(2)]

    async def drain() -> None:
        for addr, sub in zip(addrs, subs, strict=True):
            while await sub.poll(200):
                _, _, payload = await sub.recv_multipart()
                store.apply(addr, decode_payload(payload).events)

    try:
        turn1 = [{"role": "system", "content": SYSTEM}, {"role": "user", "content": "Run the tests."}]
        async with aiohttp.ClientSession() as http:
            for addr, sub in zip(addrs, subs, strict=True):  # PUB/SUB slow joiner: wait until live
                for _ in range(100):
                    async with http.post(f"http://{addr}/reset_prefix_cache") as r:
                        assert r.status == 200
                    if await sub.poll(100):
                        break
            await drain()
            url = f"http://{addrs[0]}/v1/chat/completions"
            async with http.post(url, json={"model": MODEL, "messages": turn1, "max_tokens": 30}) as r:
                answer = (await r.json())["choices"][0]["message"]["content"]
            await drain()
            turn2 = [*turn1, {"role": "assistant", "content": answer}, {"role": "user", "content": "Fix it."}]
            key = index.key_messages(turn2)
            hits = index.local_hits(key, addrs)
            assert hits[addrs[1]] == 0 and hits[addrs[0]] > 0
            async with http.post(url, json={"model": MODEL, "messages": turn2, "max_tokens": 2}) as r:
                usage = (await r.json())["usage"]
            assert usage["prompt_tokens"] == key.prompt_tokens
            cap = (key.prompt_tokens - 1) // 16 * 16  # the engine recomputes the last prompt token
            assert usage["prompt_tokens_details"]["cached_tokens"] == min(hits[addrs[0]], cap)

            async with http.get(f"http://{addrs[0]}/metrics") as r:
                parsed = parse_vllm_metrics(await r.text(), 0.0)
        assert parsed.cache.block_size == 16 and parsed.cache.hash_algo == "sha256"
        assert parsed.metrics.kv_capacity_tokens == config.capacity_tokens
        assert parsed.metrics.prefix_cache_hits == usage["prompt_tokens_details"]["cached_tokens"]
    finally:
        ctx.destroy(linger=0)
        await cluster.stop()
