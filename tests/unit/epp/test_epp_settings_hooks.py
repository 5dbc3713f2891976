"""Typed picker settings from the flags; the servicer's feedback goes through the
picker's hooks only; the datastore reads its index through the PoolIndex protocol."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

from smetric.core.views import RequestView
from smetric.epp.contracts import PoolIndex
from smetric.epp.index.approximate import ApproximateIndex
from smetric.epp.parse.usage import Usage
from smetric.epp.server.hooks import ResponseHooks
from smetric.epp.settings import PickerSettings
from tests.support.epp_harness import build

ROOT = Path(__file__).resolve().parents[3]


def test_settings_from_flags_have_seconds_and_a_peer_tuple() -> None:
    s = PickerSettings.from_argv(
        [
            "--endpoints=10.0.0.1:8000",
            "--staleness-threshold-ms=1500",
            "--decision-budget-ms=250",
            "--scrape-timeout-ms=300",
            "--peers= a:1, ,b:2",
            "--response-path=observer",
        ]
    )
    assert (s.staleness_s, s.decision_budget_s, s.scrape_timeout_s) == (1.5, 0.25, 0.3)
    assert s.peers == ("a:1", "b:2") and s.response_observer
    defaults = PickerSettings.from_argv([])
    assert (defaults.refresh_interval_s, defaults.grpc_port, defaults.prefix_index) == (
        0.05,
        9002,
        "approximate",
    )
    with pytest.raises(AttributeError):
        s.grpc_port = 1  # type: ignore[misc]


def test_no_namespace_travels_past_main() -> None:
    for path in (ROOT / "epp/smetric/epp").rglob("*.py"):
        if path.name in ("main.py", "settings.py", "timing.py"):  # the parse sites
            continue
        if path.relative_to(ROOT / "epp/smetric/epp").as_posix() == "upstream/flags.py":
            continue  # the upstream flags' parse site (settings.py calls it)
        assert "argparse.Namespace" not in path.read_text(), path


@pytest.mark.parametrize("part", ["servicer.py", "intake.py", "response_path.py"])
def test_servicer_reaches_no_picker_internals(part: str) -> None:
    tree = ast.parse((ROOT / "epp/smetric/epp/server" / part).read_text())
    touched = {
        n.attr
        for n in ast.walk(tree)
        if isinstance(n, ast.Attribute) and isinstance(n.value, ast.Attribute) and n.value.attr == "picker"
    }
    assert not touched & {"ledger", "rates", "cost_model", "core", "index"}


def test_picker_hooks_release_the_ledger_and_feed_the_rate_estimate() -> None:
    servicer, _, _, _ = build()
    picker = servicer.picker
    hooks: ResponseHooks = picker
    pick = picker.pick(RequestView("r1", prompt_tokens=4000), "x" * 16000)
    assert hooks.queued_cost_s(pick.ledger_address) == pytest.approx(pick.cost_s)
    assert hooks.on_prefill_done(pick, "r1") == pytest.approx(0.0)
    assert hooks.on_prefill_done(pick, "r1") is None  # idempotent
    speed = None
    for _ in range(20):
        speed = hooks.on_complete(pick, 2 * pick.cost_s, Usage(4000, 10, 0), prompt_known=True) or speed
    assert speed is not None and speed < 1.0  # twice the expected time: slower than modelled
    hooks.on_endpoint_removed(pick.ledger_address)
    assert picker.rates.samples(pick.ledger_address) == 0


def test_both_indexes_are_pool_indexes() -> None:
    index: PoolIndex = ApproximateIndex(block_tokens=16)
    assert index.engine_block_size is None and not index.reads_kv_events
