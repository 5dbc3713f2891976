"""`smetric simulate` end to end on a tiny agentic-format file, and briefly on the real trace."""

from __future__ import annotations

import json
from pathlib import Path

import pytest

from smetric.sim.cli import default_trace, main
from smetric.sim.simulator import SimConfig, simulate
from smetric.sim.sweep import WorkloadSpec, prepared
from tests.support.sim_synth import write_agentic


def test_cli_writes_json_and_plot(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    trace = tmp_path / "tiny.jsonl.gz"
    write_agentic(trace)
    out, png = tmp_path / "r.json", tmp_path / "r.png"
    argv = [
        "--trace", str(trace), "--instances", "2", "--policies", "smetric,round-robin",
        "--rates", "1,3", "--base-rate", "0.2", "--warmup-s", "0", "--measure-s", "120",
        "--workers", "1", "--json", str(out), "--plot", str(png), "--seed", "0", "--no-extend-past-knee",
    ]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["config"]["instances"] == 2
    assert doc["config"]["base_families_per_s"] == pytest.approx(0.2 * 2 / 32)
    assert doc["config"]["shared_system_prompt"] is True
    assert doc["trace"]["requests"] == 16
    assert "requests_over_limit_dropped" in doc["trace"]
    rows = doc["results"]
    assert [(r["policy"], r["rate_multiplier"]) for r in rows] == [
        ("smetric", 1.0), ("smetric", 3.0), ("round-robin", 1.0), ("round-robin", 3.0)
    ]  # fmt: skip
    for r in rows:
        for key in ("tps_within_slo", "prefill_tps_within_slo", "slo_attainment", "ttft_p99_s",
                    "tpot_p90_s", "reuse_ratio", "imbalance_p99", "requests_dropped", "seed",
                    "events", "families_per_s", "requests_per_s", "arrival_rate_start_per_s",
                    "arrival_rate_end_per_s", "arrival_drift"):  # fmt: skip
            assert key in r
        assert "sim_wall_s" not in r  # wall clock only in the sidecar: the JSON is reproducible
    assert png.stat().st_size > 10_000
    assert "smetric" in capsys.readouterr().out


def test_cli_rejects_bad_arguments(tmp_path: Path) -> None:
    assert main(["--trace", str(tmp_path / "missing.jsonl.gz"), "--workers", "1"]) == 2
    trace = tmp_path / "tiny.jsonl.gz"
    write_agentic(trace)
    assert main(["--trace", str(trace), "--policies", "nope"]) == 2
    assert main(["--trace", str(trace), "--rates", "1,-2"]) == 2
    with pytest.raises(SystemExit):
        main(["--mode", "both"])


REAL = default_trace()


@pytest.mark.skipif(not REAL.exists(), reason="shared agentic trace not available")
def test_real_trace_subsample_runs_briefly() -> None:
    work = prepared(WorkloadSpec(str(REAL), subsample=0.05, seed=0))
    assert work.n_families >= 20
    # cold arrivals: with a 5-minute warm-up, sessions already running at t = 0 (stationary
    # arrivals) would still be sending their first, uncached turn inside the window
    cfg = SimConfig(instances=4, warmup_s=300.0, measure_s=600.0, arrivals="cold")
    res = simulate(work, "smetric", 0.01, cfg)
    m = res.metrics
    assert int(m["requests_served_in_window"]) > 0
    assert 0.5 < float(m["reuse_ratio"]) <= 1.0


def test_undefined_metrics_are_json_null(tmp_path: Path) -> None:
    trace = tmp_path / "tiny.jsonl.gz"
    write_agentic(trace)
    out = tmp_path / "pd.json"
    argv = ["--trace", str(trace), "--instances", "2", "--mode", "disaggregated", "--policies", "dynamo",
            "--rates", "1", "--base-rate", "0.2", "--warmup-s", "0", "--measure-s", "120",
            "--workers", "1", "--json", str(out), "--seed", "0", "--no-extend-past-knee"]  # fmt: skip
    assert main(argv) == 0
    text = out.read_text()
    assert "NaN" not in text
    row = json.loads(text)["results"][0]
    assert row["tps_within_slo"] is None and row["tpot_p50_s"] is None
    assert row["prefill_tps_within_slo"] > 0


def test_cli_flags_runs_whose_offered_load_drifted(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    trace = tmp_path / "tiny.jsonl.gz"
    write_agentic(trace, families=6, turns=6)
    out = tmp_path / "r.json"
    argv = [
        "--trace", str(trace), "--instances", "2", "--policies", "round-robin", "--rates", "2,8",
        "--base-rate", "8", "--warmup-s", "0", "--measure-s", "200", "--workers", "1",
        "--json", str(out), "--seed", "0", "--no-extend-past-knee",
    ]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    assert doc["config"]["arrivals"] == "agents"
    assert doc["trace"]["max_request_tokens"] == 217_664  # whole 64-token blocks of one H20
    rows = doc["results"]
    for r in rows:
        assert r["arrival_drift_ok"] == (abs(r["arrival_drift"]) <= 0.10)
        assert r["agents"] >= 1 and r["requests_engine_rejected"] == 0
    flagged = [r for r in rows if not r["arrival_drift_ok"]]
    assert flagged  # 200 s of a handful of agents is not steady
    captured = capsys.readouterr()
    text = " ".join((captured.out + captured.err).split())
    assert f"{len(flagged)} of {len(rows)} runs drifted by more than 10 %" in text


def test_an_unwritable_output_is_one_line_before_any_work(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """The output paths are checked before the trace is read: a missing trace is not even looked at."""
    from smetric.sim.cli import main as simulate_main

    blocker = tmp_path / "a-file"
    blocker.write_text("x")
    for flag in ("--json", "--plot"):
        argv = ["--trace", str(tmp_path / "no-such-trace.jsonl"), flag, str(blocker / "out.x")]
        assert simulate_main(argv) == 2
        err = capsys.readouterr().err.strip()
        assert err.startswith(f"smetric simulate: {flag} ") and "no-such-trace" not in err, err
        assert "\n" not in err
    assert simulate_main(["--trace", str(tmp_path / "t.jsonl"), "--json", str(tmp_path)]) == 2
    assert "is a directory" in capsys.readouterr().err


def test_resume_from_a_file_that_is_not_a_sidecar_is_one_line_before_the_trace(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``--resume`` reads ``OUT.runs.jsonl``: a malformed one is refused before the trace is read (a
    missing trace is not even looked at)."""
    (tmp_path / "out.runs.jsonl").write_text("{bad\n")
    argv = [
        "--trace",
        str(tmp_path / "no-such-trace.jsonl"),
        "--json",
        str(tmp_path / "out.json"),
        "--resume",
    ]
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err == f"smetric simulate: {tmp_path / 'out.runs.jsonl'}: not a sweep sidecar (bad header)\n", err
