"""Engine instance: chunked-prefill budget, KV admission, exact decode stretches, reuse, tiers."""

from __future__ import annotations

import math

import pytest

from smetric.core.presets import PRESETS
from smetric.engine import (
    EngineConfig,
    EngineEvent,
    EngineRequest,
    GlobalTier,
    Instance,
    StepModel,
)

P30 = PRESETS["qwen3-30b-h20"]
MODEL = StepModel.from_preset(P30)
BT = 64


def cfg(
    capacity_blocks: int = 4_000, decode: bool = True, max_seqs: int = 256, node: int = 0
) -> EngineConfig:
    return EngineConfig(BT, capacity_blocks, 8192, max_seqs, decode, node)


def req(rid: str, prompt: int, out: int, first_id: int = 0, out_blocks: int = 0) -> EngineRequest:
    nb = prompt // BT
    pieces = ((first_id, first_id + nb - 1),) if nb else ()
    outp = ((first_id + nb, first_id + nb + out_blocks - 1),) if out_blocks else ()
    return EngineRequest(rid, prompt, out, pieces, outp)


def run(inst: Instance, until: float = math.inf) -> list[EngineEvent]:
    out: list[EngineEvent] = []
    while inst.next_event_s() <= until and inst.next_event_s() < math.inf:
        out += inst.advance(inst.next_event_s())
    return out


def by(events: list[EngineEvent], kind: str, rid: str) -> EngineEvent:
    return next(e for e in events if e.kind == kind and e.request.request_id == rid)


def test_cold_prefill_is_chunked_at_the_token_budget() -> None:
    inst = Instance("i", MODEL, cfg())
    inst.submit(req("a", 20_000, 1, 0), 0.0)
    ev = run(inst)
    chunks = [(0, 8192), (8192, 8192), (16384, 20_000 - 16384)]
    expected = sum(MODEL.step_s(0, 0, c, s, MODEL.chunk_s(s, c)) for s, c in chunks)
    first = by(ev, "first_token", "a")
    assert first.time_s == pytest.approx(expected)
    assert inst.steps == 3
    assert by(ev, "finished", "a").time_s == first.time_s  # one output token


def test_decodes_take_budget_before_prefill_chunks(monkeypatch: pytest.MonkeyPatch) -> None:
    seen: list[tuple[int, int]] = []
    orig = StepModel.step_s

    def spy(
        self: StepModel, n_dec: int, dctx: float, n_pre: int = 0, pctx: float = 0.0, cost: float = 0.0
    ) -> float:
        seen.append((n_dec, n_pre))
        return orig(self, n_dec, dctx, n_pre, pctx, cost)

    monkeypatch.setattr(StepModel, "step_s", spy)
    inst = Instance("i", MODEL, cfg())
    inst.submit(req("a", 1_000, 500, 0), 0.0)
    inst.submit(req("b", 1_000, 500, 10_000), 0.0)
    run(inst, 0.5)
    inst.submit(req("c", 30_000, 2, 20_000), inst.now_s)
    run(inst)
    mixed = [s for s in seen if s[0] == 2 and s[1] > 0]
    assert mixed and all(n_pre <= 8192 - 2 for _, n_pre in mixed)
    assert any(n_pre == 8190 for _, n_pre in mixed)
    assert all(n_dec + n_pre <= 8192 for n_dec, n_pre in seen)


def test_decode_stretch_is_exact_sum_of_steps() -> None:
    inst = Instance("i", MODEL, cfg())
    inst.submit(req("a", 5_000, 100, 0), 0.0)
    ev = run(inst)
    first, fin = by(ev, "first_token", "a"), by(ev, "finished", "a")
    assert fin.time_s - first.time_s == pytest.approx(MODEL.decode_stretch_s(1, 5_001, 99))
    assert fin.timing.tpot_s == pytest.approx((fin.time_s - first.time_s) / 99)
    assert inst.segments <= 3  # prefill step + one stretch: no per-token events


def test_arrival_truncates_a_stretch_at_the_step_in_flight() -> None:
    inst = Instance("i", MODEL, cfg())
    inst.submit(req("a", 5_000, 1_000, 0), 0.0)
    ev = inst.advance(inst.next_event_s())  # the prefill step: a is now decoding
    t_first = by(ev, "first_token", "a").time_s
    t_arrive = t_first + 0.1234
    inst.submit(req("b", 640, 1, 50_000), t_arrive)
    ev += run(inst)
    b = by(ev, "first_token", "b")
    step = MODEL.step_s(1, 5_001)
    assert b.timing.admitted_s >= t_arrive - 1e-9
    assert b.timing.admitted_s <= t_arrive + 1.5 * step
    # a still decodes exactly 999 steps (no token lost or duplicated by the cut)
    assert by(ev, "finished", "a").timing.output_tokens == 1_000


def test_request_waits_until_its_kv_fits() -> None:
    inst = Instance("i", MODEL, cfg(capacity_blocks=200))
    inst.submit(req("a", 8_000, 50, 0), 0.0)  # 126 blocks with its output
    inst.submit(req("b", 8_000, 50, 10_000), 0.0)  # does not fit next to a
    assert inst.num_running == 1 and inst.num_waiting == 1
    ev = run(inst)
    assert by(ev, "first_token", "b").timing.admitted_s == pytest.approx(by(ev, "finished", "a").time_s)


def test_max_num_seqs_bounds_the_running_set() -> None:
    inst = Instance("i", MODEL, cfg(max_seqs=2))
    for k in range(4):
        inst.submit(req(str(k), 640, 20, 1_000 * k), 0.0)
    inst.advance(inst.next_event_s())  # arrivals during a step join at the next step boundary
    assert inst.num_running == 2 and inst.num_waiting == 2
    ev = run(inst)
    assert by(ev, "first_token", "2").timing.admitted_s == pytest.approx(by(ev, "finished", "0").time_s)


def test_follow_up_turn_reuses_prompt_and_answer_blocks() -> None:
    inst = Instance("i", MODEL, cfg())
    inst.submit(req("t0", 6_400, 128, 0, out_blocks=2), 0.0)  # 100 prompt blocks + 2 answer blocks
    run(inst)
    t1 = EngineRequest("t1", 7_000, 10, ((0, 101), (500, 500)))
    assert inst.local_hit_tokens(t1) == 102 * BT
    inst.submit(t1, 100.0)
    ev = run(inst)
    f = by(ev, "first_token", "t1")
    assert f.timing.local_hit_tokens == 102 * BT
    assert f.timing.computed_tokens == 7_000 - 102 * BT


def test_full_hit_recomputes_last_token_block() -> None:
    inst = Instance("i", MODEL, cfg())
    inst.submit(req("a", 6_400, 1, 0), 0.0)
    run(inst)
    again = req("again", 6_400, 1, 0)
    assert inst.local_hit_tokens(again) == 6_400 - BT
    inst.submit(again, 50.0)
    assert by(run(inst), "first_token", "again").timing.computed_tokens == BT


def test_global_tier_hit_loads_over_the_nic_then_prefills_the_rest() -> None:
    nic = 25e9
    tier = GlobalTier(None, BT * P30.model.kv_bytes_per_token, nic, 1)
    a, b = Instance("a", MODEL, cfg(), tier), Instance("b", MODEL, cfg(), tier)
    a.submit(req("t0", 64_000, 1, 0), 0.0)
    run(a)
    t1 = req("t1", 64_640, 1, 0)
    assert b.local_hit_tokens(t1) == 0
    b.submit(t1, 200.0)
    f = by(run(b), "first_token", "t1")
    load_s = 1_000 * BT * P30.model.kv_bytes_per_token / nic
    assert f.timing.global_hit_tokens == 64_000
    assert f.timing.loaded_s - f.timing.admitted_s == pytest.approx(load_s)
    assert f.timing.computed_tokens == 640
    assert f.time_s - f.timing.loaded_s == pytest.approx(
        MODEL.step_s(0, 0, 640, 64_000, MODEL.chunk_s(64_000, 640))
    )


def test_prefill_only_instance_finishes_at_first_token() -> None:
    inst = Instance("p", MODEL, cfg(decode=False))
    inst.submit(req("a", 3_000, 400, 0), 0.0)
    ev = run(inst)
    assert by(ev, "finished", "a").time_s == by(ev, "first_token", "a").time_s
    assert inst.kv_usage == 0.0


def test_bad_submissions_are_rejected() -> None:
    inst = Instance("i", MODEL, cfg(capacity_blocks=10))
    with pytest.raises(ValueError, match="KV blocks"):
        inst.submit(req("big", 6_400, 10, 0), 0.0)
    inst.submit(req("ok", 128, 1, 0), 5.0)
    with pytest.raises(ValueError, match="before engine time"):
        inst.submit(req("late", 128, 1, 100), 1.0)
    with pytest.raises(ValueError):
        EngineRequest("x", 0, 1)


def test_abort_releases_kv_in_every_phase() -> None:
    inst = Instance("i", MODEL, cfg(capacity_blocks=300))
    inst.submit(req("a", 8_000, 200, 0), 0.0)
    inst.submit(req("b", 8_000, 200, 10_000), 0.0)  # waits: does not fit next to a
    assert inst.abort("b") and inst.num_waiting == 0
    assert inst.abort("a")  # prefilling
    assert inst.kv_usage == 0.0
    assert not inst.abort("a")
    inst.advance(inst.next_event_s())  # the aborted step completes without events for a
    assert run(inst) == []


def test_decoded_tokens_progress_inside_a_stretch() -> None:
    inst = Instance("i", MODEL, cfg())
    inst.submit(req("a", 5_000, 100, 0), 0.0)
    t_first = by(inst.advance(inst.next_event_s()), "first_token", "a").time_s
    step = MODEL.decode_stretch_s(1, 5_001, 99) / 99
    assert inst.decoded_tokens(t_first) == {"a": 1}
    assert inst.decoded_tokens(t_first + 10.5 * step) == {"a": 11}
    assert inst.decoded_tokens(t_first + 1_000.0) == {"a": 100}


def test_submit_keeps_events_that_happened_before_the_arrival() -> None:
    """Regression: submit() advanced the engine and dropped the events it produced."""
    inst = Instance("i", MODEL, cfg())
    inst.submit(req("a", 640, 4), 0.0)
    inst.submit(req("b", 640, 4, first_id=1_000), 100.0)  # "a" finished long before
    events = inst.advance(200.0)
    by_request = {(e.request.request_id, e.kind) for e in events}
    assert ("a", "first_token") in by_request and ("a", "finished") in by_request
    assert ("b", "finished") in by_request


# ---------------------------------------------------------------- calibrated global path
from smetric.engine.global_tier import GlobalPath  # noqa: E402


def _tiered_pair(path: GlobalPath) -> tuple[Instance, Instance, float]:
    """Instance ``a`` wrote a 64k-token session to the tier; ``b`` is busy decoding one request."""
    tier = GlobalTier(None, BT * P30.model.kv_bytes_per_token, 25e9, 1, path)
    a, b = Instance("a", MODEL, cfg(), tier), Instance("b", MODEL, cfg(), tier)
    a.submit(req("t0", 64_000, 1, 0), 0.0)
    run(a)
    b.submit(req("d", 1_000, 2_000, 500_000), 100.0)  # a long decode on b
    run(b, 100.5)
    load_s = 1_000 * BT * P30.model.kv_bytes_per_token / (path.load_gbit_s_per_gpu or 200.0) / 1e9 * 8
    return a, b, load_s


def test_sync_load_stalls_the_whole_batch_async_only_the_request() -> None:
    finish: dict[str, float] = {}
    for mode in ("sync", "async"):
        _, b, load_s = _tiered_pair(GlobalPath(60.0, None, 0.0, False, mode))
        b.submit(req("t1", 64_640, 1, 0), 101.0)  # global hit of 64k tokens: 0.84 s at 7.5 GB/s
        ev = run(b)
        f = by(ev, "first_token", "t1")
        assert f.timing.global_hit_tokens == 64_000
        assert f.timing.loaded_s - f.timing.admitted_s == pytest.approx(load_s, rel=1e-6)
        finish[mode] = by(ev, "finished", "d").time_s
    # the decoding request waited for the whole load only when loads are synchronous
    assert finish["sync"] - finish["async"] == pytest.approx(load_s, rel=0.02)


def test_lookup_latency_is_paid_by_every_admission() -> None:
    lookup = 0.005
    tier = GlobalTier(
        None,
        BT * P30.model.kv_bytes_per_token,
        25e9,
        1,
        GlobalPath(None, None, lookup, False, "async", save_copy=False),
    )
    with_tier, without = Instance("a", MODEL, cfg(), tier), Instance("b", MODEL, cfg())
    for inst in (with_tier, without):
        inst.submit(req("x", 3_000, 1, 0), 0.0)
    ttft = by(run(with_tier), "first_token", "x").time_s
    ttft_ref = by(run(without), "first_token", "x").time_s
    assert ttft - ttft_ref == pytest.approx(lookup)


def test_async_lookup_delays_only_the_request_sync_stalls_the_batch() -> None:
    """LMCacheConnectorV1 looks up in the scheduler (the step waits); LMCacheMPConnector's lookup
    answers "not yet" and vLLM skips only that request."""
    lookup = 0.05
    finish: dict[str, float] = {}
    for mode in ("sync", "async"):
        path = GlobalPath(None, None, lookup, False, mode)
        inst = Instance("b", MODEL, cfg(), GlobalTier(None, BT * P30.model.kv_bytes_per_token, 25e9, 1, path))
        inst.submit(req("d", 1_000, 2_000, 500_000), 0.0)  # a long decode
        run(inst, 0.5)
        inst.submit(req("x", 640, 1, 0), 1.0)  # no global hit: only its lookup
        ev = run(inst)
        assert by(ev, "first_token", "x").time_s - 1.0 >= lookup  # the request waits either way
        finish[mode] = by(ev, "finished", "d").time_s
    assert finish["sync"] - finish["async"] == pytest.approx(lookup, rel=0.05)


def test_computed_kv_is_written_back_over_the_writer_node_link() -> None:
    tier = GlobalTier(
        None, BT * P30.model.kv_bytes_per_token, 25e9, 2, GlobalPath(None, None, 0.0, True, "async")
    )
    inst = Instance("a", MODEL, cfg(node=1), tier)
    inst.submit(req("x", 6_400, 2, 0, out_blocks=1), 0.0)
    ev = run(inst)
    # the prompt only: LMCache 0.5.6 saves no decode tokens (save_decode_cache false)
    assert tier.bytes_written == pytest.approx(100 * BT * P30.model.kv_bytes_per_token)
    assert tier.link_free_s(1) > by(ev, "first_token", "x").time_s and tier.link_free_s(0) == 0.0


def test_the_answer_is_written_only_with_save_decode_cache() -> None:
    block = BT * P30.model.kv_bytes_per_token
    for save_decode, blocks in ((False, 100), (True, 101)):
        path = GlobalPath(None, None, 0.0, True, "async", save_decode_cache=save_decode)
        tier = GlobalTier(None, block, 25e9, 1, path)
        inst = Instance("a", MODEL, cfg(), tier)
        inst.submit(req("x", 6_400, 2, 0, out_blocks=1), 0.0)
        run(inst)
        assert tier.bytes_written == pytest.approx(blocks * block)


def test_only_whole_lmcache_chunks_are_written() -> None:
    # 6,500 tokens = 25 whole 256-token chunks (6,400 tokens = 100 blocks) + 100 tokens LMCache drops
    # (save_unfull_chunk false); the next turn's write starts at the tier's hit aligned down to a chunk
    tier = GlobalTier(
        None, BT * P30.model.kv_bytes_per_token, 25e9, 1, GlobalPath(None, None, 0.0, True, "async")
    )
    assert tier.written_range(0, 6_500, BT, 101) == (0, 100)
    assert tier.written_range(10, 6_500, BT, 101) == (8, 100)  # 640 tokens held: from 512
    assert tier.written_range(0, 200, BT, 3) == (0, 0)  # less than a chunk: nothing
    inst = Instance("a", MODEL, cfg(), tier)
    inst.submit(req("x", 6_500, 1, 0), 0.0)
    run(inst)
    assert tier.bytes_written == pytest.approx(100 * BT * P30.model.kv_bytes_per_token)


def test_the_store_copy_is_charged_to_the_step() -> None:
    # LMCacheConnectorV1.wait_for_save blocks the step on the GPU -> CPU copy of what it stores
    block = BT * P30.model.kv_bytes_per_token
    ttft: dict[bool, float] = {}
    for copy in (False, True):
        tier = GlobalTier(None, block, 25e9, 1, GlobalPath(None, None, 0.0, False, "sync", save_copy=copy))
        inst = Instance("a", MODEL, cfg(), tier)
        inst.submit(req("x", 6_400, 1, 0), 0.0)
        ttft[copy] = by(run(inst), "first_token", "x").time_s
        assert tier.save_copy_s(100) == (pytest.approx(100 * block / tier.local_bytes_s) if copy else 0.0)
    assert ttft[True] - ttft[False] == pytest.approx(100 * block / tier.local_bytes_s, rel=1e-6)


def test_a_local_hit_re_stores_the_prefix_a_bounded_tier_evicted() -> None:
    # LMCache stores every prompt token past its own hit, those served from vLLM's local prefix
    # cache included (vllm_v1_adapter.py: num_saved_tokens = lmcache_cached_tokens), so a session
    # that keeps hitting its engine keeps its copy in a small tier
    tier = GlobalTier(150, BT * P30.model.kv_bytes_per_token, 25e9, 1)
    inst = Instance("a", MODEL, cfg(), tier)
    inst.submit(req("s1", 6_400, 1, 0), 0.0)  # blocks 0..99, written through
    run(inst)
    assert tier.match(((0, 99),)) == 100
    tier.write(((10_000, 10_099),))  # another session's 100 blocks evict 50 of s1's (tail first)
    assert tier.match(((0, 99),)) == 50
    inst.submit(req("s1b", 6_464, 1, 0), 100.0)  # s1's next turn: 100 blocks hit the GPU cache
    run(inst)
    assert tier.match(((0, 100),)) >= 100  # the whole prompt is back in the tier
