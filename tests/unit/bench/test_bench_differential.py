"""The differential harness's pure parts: the picker's decision log read back, bench records matched
to simulator decisions by request id, agreement and the cause each divergence is attributed to."""

from __future__ import annotations

import math

import orjson
import pytest

from smetric.bench.differential import (
    CAUSES,
    Decision,
    EndpointView,
    Pair,
    agreement,
    attribute,
    bench_decisions,
    endpoint_index,
    loop_delays,
    match,
    read_decisions,
    session_causes,
)


def view(load: int = 0, q: float = 0.0, c: int = 0, g: int = 0, age: float = 1.0) -> EndpointView:
    return EndpointView(load, 0, q, c, g, False, age)


IDLE = (view(), view(), view(), view())
BUSY = (view(load=3), view(load=0, c=4096), view(load=1), view(load=2))


def dec(rid: str, t: float, ep: int, views: tuple[EndpointView, ...] = BUSY) -> Decision:
    return Decision(rid, t, ep, 1.0, views)


def test_agreeing_decisions_have_no_cause() -> None:
    assert attribute(Pair("r", dec("r", 0.0, 1), dec("r", 0.0, 1))) == ""


@pytest.mark.parametrize(
    ("bench", "sim", "cause"),
    [
        (dec("r", 100.0, 0), dec("r", 0.0, 1), "pacing"),
        (dec("r", 0.0, 0, IDLE), dec("r", 0.0, 1, IDLE), "tie-break"),
        (dec("r", 0.0, 0), dec("r", 0.0, 1, IDLE), "prefix index"),  # one side idle: its inputs differ
        # the longest prefix sits elsewhere (approximate vs exact index)
        (dec("r", 0.0, 0, (view(load=3, c=4096), *BUSY[1:])), dec("r", 0.0, 1), "prefix index"),
        # the same prefix, but another engine looks least loaded in the scrape
        (dec("r", 0.0, 2, (view(load=3), view(load=2, c=4096), view(load=0), view(load=2))), dec("r", 0.0, 1),
         "gauges"),
        (dec("r", 0.0, 2, (view(load=3, q=9e3), view(c=4096, q=9e3), view(load=1), view(load=2, q=9e3))),
         dec("r", 0.0, 1, (view(load=3, q=9e3), view(c=4096), view(load=1, q=9e3), view(load=2, q=9e3))),
         "ledger timing"),
        (dec("r", 0.0, 2, tuple(view(load=x.load, c=x.local_hit_tokens, g=8192) for x in BUSY)), dec("r", 0.0, 1),
         "global hit"),
        (dec("r", 0.0, 2), dec("r", 0.0, 1), "unattributed"),
    ],
)  # fmt: skip
def test_each_divergence_is_attributed_to_the_first_input_that_differs(
    bench: Decision, sim: Decision, cause: str
) -> None:
    assert cause in CAUSES
    assert attribute(Pair("r", bench, sim), pacing_tolerance_s=1.0) == cause


def test_a_send_within_the_tolerance_is_the_same_time() -> None:
    pair = Pair("r", dec("r", 10.0, 0, IDLE), dec("r", 0.0, 1, IDLE))
    assert attribute(pair, pacing_tolerance_s=25.0) == "tie-break"
    assert attribute(pair, pacing_tolerance_s=5.0) == "pacing"


def test_matching_by_request_id_counts_what_only_one_tool_sent() -> None:
    bench = [dec("b", 2.0, 1), dec("a", 1.0, 0), dec("x", 3.0, 2), dec("unrouted", 4.0, -1)]
    sim = [dec("a", 1.0, 0), dec("b", 2.0, 3), dec("y", 5.0, 0)]
    pairs, only_bench, only_sim = match(bench, sim)
    assert [p.request_id for p in pairs] == ["a", "b"]  # the bench's send order
    assert (only_bench, only_sim) == (1, 1)
    res = agreement(pairs, pacing_tolerance_s=1.0)
    assert (res["matched"], res["agree"], res["agreement"]) == (2, 1, 0.5)
    assert res["causes"]["unattributed"] == 1 and sum(res["causes"].values()) == 1
    assert res["first_divergence"]["request_id"] == "b"
    assert agreement([])["agreement"] != agreement([])["agreement"]  # NaN: nothing matched


def test_the_decision_log_is_read_in_model_units_and_mapped_to_engine_indices() -> None:
    eps = ["127.0.0.1:9010", "127.0.0.1:9009"]  # not in port order
    line = {
        "msg": "routed", "request_id": "s~a1.0#3", "destination": "127.0.0.1:9010",
        "endpoints": [
            {"endpoint": eps[0], "running": 1, "waiting": 2, "queued_tokens": 10.0, "local_hit_tokens": 16,
             "global_hit_tokens": 32, "stale": False, "scrape_age_s": 0.01},
            {"endpoint": eps[1], "running": 0, "waiting": 0, "queued_tokens": 0.0, "local_hit_tokens": 0,
             "global_hit_tokens": 0, "stale": False, "scrape_age_s": None},
        ],
    }  # fmt: skip
    retry = dict(line, destination=eps[1])
    lines = [b"not json", orjson.dumps({"msg": "other"}), orjson.dumps(line), orjson.dumps(retry)]
    decided = read_decisions(lines, k=8.0, time_scale=0.002)
    assert (
        list(decided) == ["s~a1.0#3"] and decided["s~a1.0#3"]["destination"] == eps[0]
    )  # the first decision
    assert endpoint_index(eps) == {"127.0.0.1:9009": 0, "127.0.0.1:9010": 1}
    record = {"session_id": "s~a1.0", "turn": 3, "sent_s": 0.2,
              "outcome": {"ok": True, "engine_ttft_model_s": 2.5, "served_by": ""}}  # fmt: skip
    (d,) = bench_decisions([record], decided, time_scale=0.002)
    assert (d.request_id, d.endpoint, d.send_s, d.ttft_s) == ("s~a1.0#3", 1, pytest.approx(100.0), 2.5)
    assert math.isnan(d.views[0].scrape_age_s)  # engine 0 (port 9009): never scraped
    v = d.views[1]
    assert (v.load, v.queued_tokens, v.local_hit_tokens, v.global_hit_tokens) == (3, 80.0, 128, 256)
    assert v.scrape_age_s == pytest.approx(5.0)


def test_the_bench_loop_delay_splits_router_and_client_from_the_emulator_clock() -> None:
    ok: dict[str, object] = {"ok": True, "e2e_s": 0.30, "server_e2e_s": 0.25, "engine_e2e_model_s": 100.0}
    records: list[dict[str, object]] = [
        {"outcome": ok},
        {"outcome": {"ok": False}},
        {"outcome": dict(ok, server_e2e_s=math.nan)},
    ]
    d = loop_delays(records, time_scale=0.002)
    assert d["n"] == 1
    assert d["router_client_s"] == pytest.approx(25.0)  # 50 wall ms / 0.002
    assert d["emulator_clock_s"] == pytest.approx(25.0)  # 250 ms wall - 100 model s x 0.002
    assert d["total_s"] == pytest.approx(50.0)


def test_a_sessions_later_divergences_are_inherited_from_its_first() -> None:
    pairs = [
        Pair("s#1", dec("s#1", 0.0, 0), dec("s#1", 0.0, 1)),  # first divergence of s
        Pair("t#1", dec("t#1", 1.0, 2), dec("t#1", 1.0, 2)),
        Pair("s#2", dec("s#2", 2.0, 0), dec("s#2", 2.0, 1)),
        Pair("t#2", dec("t#2", 3.0, 0, IDLE), dec("t#2", 3.0, 1, IDLE)),
    ]
    assert session_causes(pairs, 1.0) == ["unattributed", "inherited", "tie-break"]
    assert agreement(pairs, 1.0)["causes"]["inherited"] == 1
