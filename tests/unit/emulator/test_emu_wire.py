"""Wire formats of the emulator: metrics text, SSE framing, KV-event frames, OpenAI shapes."""

from __future__ import annotations

import asyncio

import msgspec
import pytest
import zmq
import zmq.asyncio
from prometheus_client.parser import text_string_to_metric_families

from smetric.emulator import sse
from smetric.emulator.kv_events import (
    AllBlocksCleared,
    BlockRemoved,
    BlockStored,
    KvEventPublisher,
    decode_batch,
    encode_batch,
)
from smetric.emulator.metrics import InstanceMetrics
from smetric.emulator.ports import free_port_block
from smetric.emulator.protocol import ApiError, ResponseShaper, parse_request


def _samples(text: str) -> dict[str, list[tuple[dict[str, str], float]]]:
    out: dict[str, list[tuple[dict[str, str], float]]] = {}
    for fam in text_string_to_metric_families(text):
        for s in fam.samples:
            out.setdefault(s.name, []).append((dict(s.labels), s.value))
    return out


def test_metrics_text_parses_and_has_vllm_names() -> None:
    m = InstanceMetrics("my-model", block_size=16, num_gpu_blocks=1000)
    m.running.set(3)
    m.waiting.set(2)
    m.kv_usage.set(0.25)
    m.prefix_queries.inc(100)
    m.prefix_hits.inc(64)
    m.ttft.observe(0.3)
    samples = _samples(m.render().decode())
    labels = {"model_name": "my-model", "engine": "0"}
    assert samples["vllm:num_requests_running"] == [(labels, 3.0)]
    assert samples["vllm:num_requests_waiting"] == [(labels, 2.0)]
    assert samples["vllm:kv_cache_usage_perc"] == [(labels, 0.25)]
    assert samples["vllm:prefix_cache_queries_total"] == [(labels, 100.0)]
    assert samples["vllm:prefix_cache_hits_total"] == [(labels, 64.0)]
    assert ("vllm:prompt_tokens_total" in samples) and ("vllm:generation_tokens_total" in samples)
    assert samples["vllm:time_to_first_token_seconds_count"] == [(labels, 1.0)]
    ((info_labels, info_value),) = samples["vllm:cache_config_info"]
    assert info_value == 1.0
    assert info_labels["block_size"] == "16"
    assert info_labels["num_gpu_blocks"] == "1000"
    assert info_labels["prefix_caching_hash_algo"] == "sha256"


def test_two_instances_have_independent_registries() -> None:
    a, b = InstanceMetrics("m", 16, 10), InstanceMetrics("m", 16, 10)
    a.running.set(5)
    assert _samples(b.render().decode())["vllm:num_requests_running"][0][1] == 0.0


def test_sse_framing_round_trip() -> None:
    raw = sse.frame({"a": 1}) + sse.frame({"b": [1, 2]}) + sse.DONE
    assert raw.startswith(b"data: {")
    assert raw.endswith(b"data: [DONE]\n\n")
    assert list(sse.parse_frames(raw)) == [{"a": 1}, {"b": [1, 2]}, None]
    with pytest.raises(ValueError):
        list(sse.parse_frames(b"event: x\n\n"))


def test_kv_batch_encoding_is_vllm_map_form() -> None:
    stored = BlockStored(
        block_hashes=[1, 2**64 - 1], parent_block_hash=None, token_ids=[7] * 32, block_size=16
    )
    payload = encode_batch([stored, BlockRemoved([5]), AllBlocksCleared()], ts=12.5)
    ts, events, dp_rank = msgspec.msgpack.decode(payload)
    assert (ts, dp_rank) == (12.5, 0)
    assert events[0] == {
        "type": "BlockStored",
        "block_hashes": [1, 2**64 - 1],
        "parent_block_hash": None,
        "token_ids": [7] * 32,
        "block_size": 16,
        "lora_id": None,
        "medium": "GPU",
        "lora_name": None,
        "extra_keys": None,
    }
    assert events[1] == {"type": "BlockRemoved", "block_hashes": [5], "medium": "GPU"}
    assert events[2] == {"type": "AllBlocksCleared"}
    assert decode_batch(payload).events[0] == stored


async def test_publisher_frames_have_topic_and_increasing_sequence() -> None:
    ctx = zmq.asyncio.Context()
    try:
        port = free_port_block(1)
        pub = KvEventPublisher(ctx, f"tcp://127.0.0.1:{port}", "kv@127.0.0.1:8000@m")
        sub = ctx.socket(zmq.SUB)
        sub.setsockopt(zmq.SUBSCRIBE, b"kv@")
        sub.connect(f"tcp://127.0.0.1:{port}")
        # PUB/SUB slow joiner: publish until the subscription is live, then drain what is queued.
        for _ in range(500):
            await pub.publish([BlockRemoved([1])])
            if await sub.poll(20):
                break
        while await sub.poll(50):
            await sub.recv_multipart()
        start = pub.next_seq
        got = []
        for i in range(3):
            await pub.publish([BlockRemoved([100 + i])])
            got.append(await asyncio.wait_for(sub.recv_multipart(), 5))
        assert [g[0] for g in got] == [b"kv@127.0.0.1:8000@m"] * 3
        assert all(len(g[1]) == 8 for g in got)
        assert [int.from_bytes(g[1], "big") for g in got] == [start, start + 1, start + 2]
        payloads = [msgspec.msgpack.decode(g[2])[1] for g in got]
        assert payloads == [
            [{"type": "BlockRemoved", "block_hashes": [100 + i], "medium": "GPU"}] for i in range(3)
        ]
    finally:
        ctx.destroy(linger=0)


def test_parse_request_rejects_bad_bodies_with_400() -> None:
    with pytest.raises(ApiError) as err:
        parse_request("chat", [1, 2])
    assert err.value.status == 400
    with pytest.raises(ApiError) as err:
        parse_request("chat", {"model": "m", "messages": []})
    assert err.value.status == 400 and "messages" in err.value.message
    with pytest.raises(ApiError):
        parse_request("completion", {"model": "m", "prompt": "x", "max_tokens": -1})
    body = ApiError(404, "nope", "model").body()
    assert body == {"error": {"message": "nope", "type": "NotFoundError", "param": "model", "code": 404}}


def test_output_token_count_rules() -> None:
    assert parse_request("completion", {"prompt": "x"}).output_tokens == 16
    assert parse_request("completion", {"prompt": "x", "max_tokens": 5}).output_tokens == 5
    assert parse_request("completion", {"prompt": "x", "max_tokens": 5, "min_tokens": 9}).output_tokens == 9
    chat = parse_request(
        "chat", {"messages": [{"role": "user", "content": "hi"}], "max_completion_tokens": 3}
    )
    assert chat.output_tokens == 3


def test_response_shapes() -> None:
    chat = ResponseShaper("chat", "r1", "m")
    first = chat.chunk("a", first=True)
    assert first["object"] == "chat.completion.chunk"
    assert first["choices"][0]["delta"] == {"role": "assistant", "content": "a"}
    assert chat.chunk("b", "length")["choices"][0]["finish_reason"] == "length"
    u = chat.usage_chunk(10, 2, 8)
    assert u["choices"] == [] and u["usage"]["prompt_tokens_details"] == {"cached_tokens": 8}
    full = ResponseShaper("completion", "r2", "m").full("xy", 10, 2, 0)
    assert full["object"] == "text_completion" and full["choices"][0]["text"] == "xy"
    assert full["usage"]["total_tokens"] == 12
