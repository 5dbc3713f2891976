"""The per-decision log line carries the top candidates' scores (from the policy's
decision), and builds nothing when the log is off."""

from __future__ import annotations

import logging
import math
from typing import Any

import pytest

from smetric.epp.obs.logging import DECISION_LOGGER, set_decision_log
from tests.support.epp_harness import BASE_HEADERS, body_msgs, build, chat, exchange, headers_msg


async def test_decision_log_line_has_the_top_scores(serve: Any, caplog: pytest.LogCaptureFixture) -> None:
    servicer, *_ = build()
    stub = await serve(servicer)
    caplog.set_level(logging.INFO, logger="smetric.epp")
    set_decision_log(True)
    try:
        await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(chat())])
    finally:
        set_decision_log(False)
    (line,) = [r for r in caplog.records if r.name == DECISION_LOGGER]
    fields = line.__dict__
    top = fields["top_scores"]
    assert 2 <= len(top) <= 4
    assert [t["endpoint"] for t in top] == fields["ranked"][: len(top)]  # the policy's order
    d = servicer.picker.last_decision
    assert d is not None and d.scores  # smetric scores every candidate (lower is better)
    assert top[0]["score"] == round(d.scores[d.target], 6)
    assert all(isinstance(t["score"], float) and math.isfinite(t["score"]) for t in top)


async def test_no_scores_are_built_when_the_log_is_off(serve: Any) -> None:
    servicer, *_ = build()
    stub = await serve(servicer)

    def boom(k: int = 4) -> list[dict[str, object]]:
        raise AssertionError("top_scores built with the decision log off")

    servicer.picker.top_scores = boom  # type: ignore[method-assign]
    set_decision_log(False)
    out = await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(chat())])
    assert out[0].HasField("request_headers")  # routed; nothing was formatted


def test_pd_scores_are_the_prefill_decision() -> None:
    from smetric.core.views import RequestView
    from smetric.epp.contracts import EndpointInfo

    eps = [
        EndpointInfo(address=f"10.0.0.{i}:8000", role=role)
        for i, role in enumerate(("prefill", "prefill", "decode", "decode"), start=1)
    ]
    servicer, *_ = build(eps, pd=True)
    pick = servicer.picker.pick(RequestView(request_id="x", prompt_tokens=100), "hello " * 100)
    top = servicer.picker.top_scores()
    assert top[0]["endpoint"] == pick.prefill
    assert {t["endpoint"] for t in top} <= {"10.0.0.1:8000", "10.0.0.2:8000"}


async def test_decision_log_line_has_every_candidates_view(
    serve: Any, caplog: pytest.LogCaptureFixture
) -> None:
    """The differential harness (smetric.bench.differential) reads the picker's view per request
    from this field: gauges, ledger, hits and scrape age of every candidate."""
    servicer, *_ = build()
    stub = await serve(servicer)
    caplog.set_level(logging.INFO, logger="smetric.epp")
    set_decision_log(True)
    try:
        await exchange(stub, [headers_msg(BASE_HEADERS), *body_msgs(chat())])
    finally:
        set_decision_log(False)
    (line,) = [r for r in caplog.records if r.name == DECISION_LOGGER]
    views = line.__dict__["endpoints"]
    assert [v["endpoint"] for v in views] == [s.name for s in servicer.picker.last_candidates]
    assert set(line.__dict__["ranked"]) <= {v["endpoint"] for v in views}
    for v in views:
        assert {
            "running",
            "waiting",
            "queued_tokens",
            "local_hit_tokens",
            "global_hit_tokens",
            "stale",
        } <= set(v)
        age = v["scrape_age_s"]
        assert age is None or (isinstance(age, float) and age >= 0.0)
