"""Arrival drift of every bench run: measured over the window after the warm-up (the simulator's
definition), carried per seed in the JSON, shown in the printed and Markdown tables, flagged and
warned about when outside 10 %; and the --arrivals / --warmup arguments."""

from __future__ import annotations

import dataclasses
import io
import json
import math

import pytest
from rich.console import Console

from smetric.bench import cli
from smetric.bench.metrics import summarise
from smetric.bench.procs import BenchError
from smetric.bench.replay import Outcome, RequestRecord
from smetric.bench.rowreport import drift_text, render_rows, rows_json, summary_markdown
from smetric.bench.sweep import Cell, rows_of
from smetric.core.slo import SloConfig
from tests.support.bench_results import result

SLO = SloConfig(ttft_base_s=1.0, ttft_per_ktok_s=0.0625, tpot_s=0.020)
TS = 0.1


def _sent_at(model_s: list[float]) -> list[RequestRecord]:
    ok = Outcome(ok=True, status=200, ttft_s=0.01, e2e_s=0.02, output_tokens=2, prompt_tokens=100)
    return [RequestRecord("s", "f", 0, t * TS, t * TS, 100, 2, ok) for t in model_s]


def test_drift_is_measured_over_the_window_after_the_warm_up() -> None:
    # warm-up [0, 100): 50 requests, left out; window [100, 500): 10 per quarter, then 14 in the last
    warm = [2.0 * k for k in range(50)]
    window = [100 + q * 100 + 10.0 * k for q in range(3) for k in range(10)] + [
        400 + 7.0 * k for k in range(14)
    ]
    s = summarise(_sent_at(warm + window), 0, SLO, TS, [], None, measured_s=(100.0, 500.0))
    assert s.n_sent == len(window)  # the warm-up's requests are not summarised
    assert s.arrival_rate_start_per_s == pytest.approx(
        10 / 100
    ) and s.arrival_rate_end_per_s == pytest.approx(0.14)
    assert s.arrival_drift == pytest.approx(0.4) and s.arrival_drift_ok is False
    flat = summarise(
        _sent_at(window[:30] + [410.0 + k for k in range(10)]),
        0,
        SLO,
        TS,
        [],
        None,
        measured_s=(100.0, 500.0),
    )
    assert flat.arrival_drift == pytest.approx(0.0) and flat.arrival_drift_ok is True
    # no fixed window: no drift (NaN, not ok)
    none = summarise(_sent_at(window), 0, SLO, TS, [], None)
    assert math.isnan(none.arrival_drift) and none.arrival_drift_ok is False and none.n_sent == len(window)


def _cells() -> list[Cell]:
    def run(label: str, seed: int, drift: float) -> Cell:
        r = result(label, 10.0 + seed, 0.8)
        assert r.summary is not None
        summ = dataclasses.replace(r.summary, arrival_drift=drift, arrival_drift_ok=abs(drift) <= 0.10)
        return Cell(0.5, seed, dataclasses.replace(r, summary=summ))

    return [
        run("smetric", 0, 0.04),
        run("smetric", 1, -0.25),
        run("lmetric", 0, 0.02),
        run("lmetric", 1, 0.09),
    ]


def test_json_carries_each_runs_drift_and_flag() -> None:
    rows = rows_of(_cells(), ["smetric", "lmetric"], knee=0.5, past=None)
    doc = json.loads(rows_json(rows, {"arrivals": "agents"}))
    smetric, lmetric = doc["results"]
    assert [(p["seed"], p["arrival_drift"], p["arrival_drift_ok"]) for p in smetric["per_seed"]] == [
        (0, 0.04, True),
        (1, -0.25, False),
    ]
    assert (
        smetric["summary"]["arrival_drift_ok"] is False
        and smetric["summary"]["arrival_drift_max_abs"] == 0.25
    )
    assert lmetric["summary"]["arrival_drift_ok"] is True


def test_tables_show_each_runs_drift_and_warn_about_those_outside_the_bound() -> None:
    rows = rows_of(_cells(), ["smetric", "lmetric"], knee=0.5, past=None)
    assert drift_text(rows[0]) == "+4 -25!" and drift_text(rows[1]) == "+2 +9"
    just_over = dataclasses.replace(
        rows[1], per_seed=({"seed": 0, "arrival_drift": -0.1034, "arrival_drift_ok": False},)
    )
    assert drift_text(just_over) == "-10.3!"  # whole percent would read as within the bound
    out = io.StringIO()
    render_rows(rows, Console(file=out, width=400), "t")
    text = out.getvalue()
    assert "drift %" in text and "per seed" in text and "+4 -25!" in text
    assert (
        "warning: 1 of 4 runs drifted by more than 10 %" in text and "smetric rate 0.5 seed 1 (-25 %)" in text
    )
    md = summary_markdown(rows)
    assert "| +4 -25! |" in md and "warning: 1 of 4 runs drifted" in md
    steady = rows_of(_cells()[2:], ["lmetric"], knee=0.5, past=None)
    out = io.StringIO()
    render_rows(steady, Console(file=out, width=400), "t")
    assert "warning" not in out.getvalue()


def _parse(*argv: str) -> cli.Preset:
    return cli.resolve(cli.build_parser().parse_args([*argv, "--json", "x"]))


def test_arrivals_default_to_steady_agents_with_a_warm_up_and_cold_keeps_the_old_preset() -> None:
    quick, full = _parse("--quick"), _parse()
    assert quick.arrivals == full.arrivals == "agents"
    assert quick.warmup_s == 1.5 * quick.duration_s and full.warmup_s == full.duration_s / 2
    cold = _parse("--quick", "--arrivals", "cold")
    assert cold.arrivals == "cold" and cold.warmup_s == 0 and cold.rates == (0.005, 0.007)
    assert _parse("--arrivals", "cold").rate == pytest.approx(1.41)
    stationary = _parse("--quick", "--arrivals", "stationary")
    assert stationary.arrivals == "stationary" and stationary.rates == quick.rates
    assert _parse("--quick", "--warmup", "0").warmup_s == 0.0
    assert (
        _parse("--quick", "--duration", "600").warmup_s == 900.0
    )  # the preset's share of any window (1.5 windows)
    for bad in (["--warmup", "-1"], ["--warmup", "nan"], ["--sessions", "5"]):
        with pytest.raises(BenchError):
            _parse("--quick", *bad)
    assert _parse("--quick", "--arrivals", "cold", "--sessions", "5").sessions == 5
    with pytest.raises(SystemExit):
        _parse("--arrivals", "poisson")
