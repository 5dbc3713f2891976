"""The emulator's HTTP behaviour, in process: usage, prefix hits, errors, abort, faults."""

from __future__ import annotations

import asyncio
from collections.abc import AsyncIterator

import aiohttp
import pytest
from prometheus_client.parser import text_string_to_metric_families

from smetric.emulator import sse
from smetric.emulator.cluster import RunningCluster, start_cluster
from smetric.emulator.config import EmulatorConfig
from smetric.emulator.ports import free_port_block
from smetric.emulator.protocol import SERVER_TIMING_FIELD

MODEL = "emu-model"


async def _cluster(**overrides: object) -> RunningCluster:
    kwargs: dict[str, object] = {
        "port": free_port_block(2),
        "instances": 1,
        "model": MODEL,
        "time_scale": 0.01,
    }
    kwargs.update(overrides)
    return await start_cluster(EmulatorConfig(**kwargs))


@pytest.fixture
async def cluster() -> AsyncIterator[RunningCluster]:
    c = await _cluster(max_model_len=4096)
    yield c
    await c.stop()


def _url(c: RunningCluster, path: str, i: int = 0) -> str:
    return f"http://{c.runners[i].addresses[0][0]}:{c.runners[i].addresses[0][1]}{path}"


async def _metrics(http: aiohttp.ClientSession, c: RunningCluster) -> dict[str, float]:
    async with http.get(_url(c, "/metrics")) as r:
        text = await r.text()
    out: dict[str, float] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            reason = s.labels.get("finished_reason")
            out[f"{s.name}[{reason}]" if reason else s.name] = s.value
    return out


CHAT = [{"role": "system", "content": "You are a careful coding agent. " * 30},
        {"role": "user", "content": "Fix the failing test in parser.py please."}]  # fmt: skip


async def test_repeated_prompt_hits_prefix_cache_and_reports_cached_tokens(cluster: RunningCluster) -> None:
    async with aiohttp.ClientSession() as http:
        body = {"model": MODEL, "messages": CHAT, "max_tokens": 4}
        async with http.post(_url(cluster, "/v1/chat/completions"), json=body) as r:
            first = await r.json()
        async with http.post(_url(cluster, "/v1/chat/completions"), json=body) as r:
            second = await r.json()
        m = await _metrics(http, cluster)
    p = first["usage"]["prompt_tokens"]
    assert first["usage"]["completion_tokens"] == 4
    assert first["usage"]["prompt_tokens_details"]["cached_tokens"] == 0
    assert first["choices"][0]["message"]["content"] == "lore ipsu "
    cached = second["usage"]["prompt_tokens_details"]["cached_tokens"]
    assert cached == (p - 1) // 16 * 16 > 0  # full blocks, the last prompt token is always recomputed
    assert m["vllm:prefix_cache_queries_total"] == 2 * p
    assert m["vllm:prefix_cache_hits_total"] == cached
    assert m["vllm:request_success_total[length]"] == 2


async def test_follow_up_turn_reuses_previous_prompt_and_answer(cluster: RunningCluster) -> None:
    async with aiohttp.ClientSession() as http:
        url = _url(cluster, "/v1/chat/completions")
        async with http.post(url, json={"model": MODEL, "messages": CHAT, "max_tokens": 40}) as r:
            turn1 = await r.json()
        answer = turn1["choices"][0]["message"]["content"]
        msgs = [*CHAT, {"role": "assistant", "content": answer}, {"role": "user", "content": "Now run it."}]
        async with http.post(url, json={"model": MODEL, "messages": msgs, "max_tokens": 4}) as r:
            turn2 = await r.json()
    before = turn1["usage"]["prompt_tokens"] + 40
    assert turn2["usage"]["prompt_tokens_details"]["cached_tokens"] == before // 16 * 16


async def test_streaming_frames_usage_and_done(cluster: RunningCluster) -> None:
    body = {"model": MODEL, "prompt": "def main():", "max_tokens": 5, "stream": True,
            "stream_options": {"include_usage": True}}  # fmt: skip
    async with aiohttp.ClientSession() as http, http.post(_url(cluster, "/v1/completions"), json=body) as r:
        assert r.headers["Content-Type"].startswith("text/event-stream")
        raw = await r.read()
    frames = list(sse.parse_frames(raw))
    assert frames[-1] is None
    chunks = [f for f in frames[:-1] if f is not None and f["choices"]]
    assert "".join(c["choices"][0]["text"] for c in chunks) == "lore ipsu dolo"
    assert [c["choices"][0]["finish_reason"] for c in chunks] == [None] * 4 + ["length"]
    usage = frames[-2]
    assert usage is not None and usage["choices"] == [] and usage["usage"]["completion_tokens"] == 5
    # the emulator's own timing (docs/bench.md, time accounting): wall since arrival, modelled engine time
    timing = usage[SERVER_TIMING_FIELD]
    assert 0 < timing["ttft_wall_s"] <= timing["e2e_wall_s"]
    assert 0 < timing["engine_ttft_s"] < timing["engine_e2e_s"]


async def test_errors_are_openai_shaped(cluster: RunningCluster) -> None:
    url = _url(cluster, "/v1/chat/completions")
    async with aiohttp.ClientSession() as http:
        async with http.post(url, data=b"{not json") as r:
            assert r.status == 400
            assert (await r.json())["error"]["code"] == 400
        async with http.post(url, json={"model": "other", "messages": CHAT}) as r:
            assert r.status == 404
            assert (await r.json())["error"]["type"] == "NotFoundError"
        long = [{"role": "user", "content": "word " * 5000}]
        async with http.post(url, json={"model": MODEL, "messages": long}) as r:
            assert r.status == 400
            assert "maximum context length is 4096" in (await r.json())["error"]["message"]
        async with http.post(_url(cluster, "/v1/completions"), json={"model": MODEL, "prompt": ""}) as r:
            assert r.status == 400


async def test_client_disconnect_aborts_and_releases_kv() -> None:
    c = await _cluster(time_scale=1.0)
    inst = c.instances[0]
    try:
        body = {"model": MODEL, "prompt": "x " * 200, "max_tokens": 20000, "stream": True}
        async with aiohttp.ClientSession() as http:
            async with http.post(_url(c, "/v1/completions"), json=body) as r:
                await r.content.readuntil(b"\n\n")  # first token arrived: the request is decoding
                assert inst.engine.num_running == 1 and inst.engine.kv_usage > 0
            for _ in range(200):  # the server notices the closed connection
                if inst.engine.num_running == 0:
                    break
                await asyncio.sleep(0.01)
            assert inst.engine.num_running == 0
            assert inst.engine.kv_usage == 0.0
            m = await _metrics(http, c)
            assert m["vllm:request_success_total[abort]"] == 1
            assert m["vllm:request_success_total[length]"] == 0
    finally:
        await c.stop()
    assert len(inst.blocks) == inst.engine.cache.cached_blocks  # no leaked in-flight references


async def test_fail_after_and_admin_fault() -> None:
    c = await _cluster(fail_after=1)
    try:
        async with aiohttp.ClientSession() as http:
            url = _url(c, "/v1/completions")
            async with http.post(url, json={"prompt": "a b c", "max_tokens": 2}) as r:
                assert r.status == 200
            async with http.post(url, json={"prompt": "a b c", "max_tokens": 2}) as r:
                assert r.status == 503
            async with http.get(_url(c, "/health")) as r:
                assert r.status == 503
            async with http.post(_url(c, "/admin/fault"), json={"mode": "ok"}) as r:
                assert (await r.json())["mode"] == "ok"
            async with http.get(_url(c, "/health")) as r:
                assert r.status == 200
            async with http.post(_url(c, "/admin/fault"), json={"mode": "slow", "slowdown": 0}) as r:
                assert r.status == 400
    finally:
        await c.stop()


async def test_models_and_health(cluster: RunningCluster) -> None:
    async with aiohttp.ClientSession() as http:
        async with http.get(_url(cluster, "/v1/models")) as r:
            assert (await r.json())["data"][0]["id"] == MODEL
        async with http.get(_url(cluster, "/health")) as r:
            assert r.status == 200


async def test_global_tier_is_shared_by_the_process_instances() -> None:
    c = await _cluster(instances=2, global_tier="full")
    try:
        body = {"model": MODEL, "messages": CHAT, "max_tokens": 4}
        async with aiohttp.ClientSession() as http:
            async with http.post(_url(c, "/v1/chat/completions", 0), json=body) as r:
                p = (await r.json())["usage"]["prompt_tokens"]
            async with http.post(_url(c, "/v1/chat/completions", 1), json=body) as r:
                cached = (await r.json())["usage"]["prompt_tokens_details"]["cached_tokens"]
            async with http.get(_url(c, "/metrics", 1)) as r:
                text = await r.text()
        hits = {s.name: s.value for f in text_string_to_metric_families(text) for s in f.samples}
        # loaded from the global tier: the whole 256-token LMCache chunks written (save_unfull_chunk false) ...
        assert cached == min((p - 1) // 16 * 16, p // 256 * 256) > 0
        assert hits["vllm:prefix_cache_hits_total"] == 0  # ... not a local (GPU-tier) hit
    finally:
        await c.stop()


async def test_dead_instance_ends_running_streams_and_slow_mode_slows_down() -> None:
    c = await _cluster(time_scale=0.3)
    inst = c.instances[0]
    try:
        body = {"model": MODEL, "prompt": "x " * 100, "max_tokens": 5000, "stream": True}
        async with aiohttp.ClientSession() as http:
            async with http.post(_url(c, "/v1/completions"), json=body) as r:
                await r.content.readuntil(b"\n\n")
                async with http.post(_url(c, "/admin/fault"), json={"mode": "dead"}) as f:
                    assert f.status == 200
                rest = await r.read()
            frames = list(sse.parse_frames(rest))
            assert frames[-1] is None
            assert frames[-2] is not None and frames[-2]["error"]["code"] == 503
            assert inst.engine.num_running == 0 and inst.engine.kv_usage == 0.0
            # slow: the same request takes about `slowdown` times longer
            async with http.post(_url(c, "/admin/fault"), json={"mode": "ok"}):
                pass
            short = {"model": MODEL, "prompt": "x " * 1500, "max_tokens": 1}
            loop = asyncio.get_running_loop()
            t = loop.time()
            async with http.post(_url(c, "/v1/completions"), json=short) as r:
                assert r.status == 200
            fast = loop.time() - t
            async with http.post(_url(c, "/admin/fault"), json={"mode": "slow", "slowdown": 3}):
                pass
            short["prompt"] = "y " * 1500  # no prefix hit
            t = loop.time()
            async with http.post(_url(c, "/v1/completions"), json=short) as r:
                assert r.status == 200
            slow = loop.time() - t
        assert slow > 2 * fast
    finally:
        await c.stop()


async def test_render_gives_the_prompt_ids_the_engine_counts_and_schedules_nothing(
    cluster: RunningCluster,
) -> None:
    """vLLM's render routes: what a token-matching router (vllm-router cache_aware) asks for."""
    async with aiohttp.ClientSession() as http:
        body = {"model": MODEL, "messages": CHAT, "max_tokens": 4}
        async with http.post(_url(cluster, "/v1/chat/completions/render"), json=body) as r:
            assert r.status == 200
            rendered = await r.json()
        async with http.post(
            _url(cluster, "/v1/completions/render"), json={"model": MODEL, "prompt": "a b c"}
        ) as r:
            plain = await r.json()
        async with http.post(_url(cluster, "/v1/chat/completions/render"), json={"model": MODEL}) as r:
            bad = r.status
        before = await _metrics(http, cluster)
        async with http.post(_url(cluster, "/v1/chat/completions"), json=body) as r:
            usage = (await r.json())["usage"]
    assert len(rendered["token_ids"]) == usage["prompt_tokens"] > 0
    assert all(isinstance(t, int) for t in rendered["token_ids"]) and rendered["features"] is None
    assert len(plain["token_ids"]) > 0 and bad == 400
    assert before.get("vllm:prefix_cache_queries_total", 0.0) == 0.0  # rendering ran nothing
