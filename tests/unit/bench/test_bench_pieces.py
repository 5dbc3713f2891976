"""The fair-rivals table (smetric.bench.evidence.pieces): margins from a sweep's JSON, and the same
table from its ``.runs.jsonl`` sidecar (an interrupted or running sweep)."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from smetric.bench.evidence.inputs import InputError
from smetric.bench.evidence.pieces import load, main, regime


def _row(policy: str, seed: int, value: float, pd: bool) -> dict[str, object]:
    return {
        "policy": policy,
        "seed": seed,
        "rate_multiplier": 5.0,
        "tps_within_slo": None if pd else value,
        "prefill_tps_within_slo": value if pd else 0.0,
        "local_hit_ratio": 0.5,
        "decision_reasons": {"overload": 1, "stick": 3} if policy.endswith("+pieces") else {"stick": 4},
    }


def _rows(pd: bool) -> list[dict[str, object]]:
    values = {"smetric": 110.0, "smetric-paper": 90.0, "lmetric": 100.0, "lmetric+pieces": 108.0}
    return [_row(p, s, v + s, pd) for p, v in values.items() for s in (10, 11, 12)]


def test_a_sidecar_gives_the_table_of_its_sweeps_json(tmp_path: Path) -> None:
    for pd in (False, True):
        rows = _rows(pd)
        doc = {"config": {"mode": "disaggregated" if pd else "colocated"}, "results": rows}
        path = tmp_path / f"x{pd}.json"
        path.write_text(json.dumps(doc))
        sidecar = tmp_path / f"x{pd}.runs.jsonl"
        lines = [json.dumps({"format": "smetric-sim-runs/1", "fingerprint": "f"})]
        lines += [json.dumps({"key": ["", r["policy"], r["seed"], 5.0], "row": r}) for r in rows]
        sidecar.write_text("\n".join(lines) + '\n{"key": ["", "torn')  # a torn last line
        gz = tmp_path / f"x{pd}.runs.jsonl.gz"  # the committed results are gzipped sidecars
        gz.write_bytes(gzip.compress(sidecar.read_bytes()))
        table = regime("x", load(str(path)), None)
        assert regime("x", load(str(sidecar)), None) == table
        assert regime("x", load(str(gz)), None) == table
        assert ("prefill_tps_within_slo" in table) == pd
        assert "smetric vs lmetric (best as shipped): +9.0 %" in table
        assert "smetric-paper vs lmetric" in table and "loss" in table.split("smetric-paper vs")[1]


def test_peaks_over_rates_and_two_sweeps_of_one_regime(tmp_path: Path) -> None:
    """--peak takes each seed's best over the rates; A+B reads one regime from two sweeps."""
    low = [{**r, "rate_multiplier": 4.0} for r in _rows(False)]
    high = [
        {**r, "rate_multiplier": 5.0, "tps_within_slo": float(str(r["tps_within_slo"])) * 2}
        for r in _rows(False)
    ]
    high = [r for r in high if r["policy"] != "smetric"]  # smetric peaks at 4x, the others at 5x
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"config": {"mode": "colocated"}, "results": low}))
    b.write_text(json.dumps({"config": {"mode": "colocated"}, "results": high}))
    table = regime("x", load(f"{a}+{b}"), None, peak=True)
    assert "peaks over [4.0, 5.0]" in table
    assert "smetric vs lmetric (best as shipped): -45." in table  # 110+s against 2 x (100+s)


def test_a_rerun_of_some_policies_replaces_their_runs_and_keeps_the_rest(tmp_path: Path) -> None:
    first = _rows(False)
    rerun = [_row("smetric", s, 200.0, False) for s in (10, 11, 12)]
    for name, rows in (("a.json", first), ("b.json", rerun)):
        (tmp_path / name).write_text(json.dumps({"config": {"mode": "colocated"}, "results": rows}))
    doc = load(f"{tmp_path / 'a.json'}+{tmp_path / 'b.json'}")
    smetric = [r for r in doc["results"] if r["policy"] == "smetric"]
    assert len(doc["results"]) == len(first) and [r["tps_within_slo"] for r in smetric] == [200.0] * 3


def test_a_file_that_is_not_a_gzipped_sidecar_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "x.runs.jsonl.gz"
    bad.write_text("not gzip")
    with pytest.raises(ValueError, match="not a sweep sidecar"):
        load(str(bad))


def test_only_some_policies_of_a_sweep_and_only_some_rates(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """``A@smetric+B``: SMetric's runs of A (its baselines re-run since, in B); ``--rates`` keeps a grid's rates."""
    # a stale baseline, not re-run
    old = [{**r, "policy": "dynamo", "tps_within_slo": 1.0} for r in _rows(False)]
    a_rows = [r for r in _rows(False) if r["policy"] == "smetric"] + old
    a_rows += [{**r, "rate_multiplier": 9.0, "tps_within_slo": 999.0} for r in _rows(False)]  # off the grid
    b_rows = [r for r in _rows(False) if r["policy"] != "smetric"]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    a.write_text(json.dumps({"config": {"mode": "colocated"}, "results": a_rows}))
    b.write_text(json.dumps({"config": {"mode": "colocated"}, "results": b_rows}))
    doc = load(f"{a}@smetric,smetric-paper+{b}")
    assert {
        r["policy"] for r in doc["results"] if r["tps_within_slo"] == 1.0
    } == set()  # the stale rows left out
    assert main([f"{a}@smetric+{b}", "--rates", "5", "--peak"]) == 0
    out = capsys.readouterr().out
    assert "smetric vs lmetric (best as shipped): +9.0 %" in out and "999" not in out
    with pytest.raises(InputError, match="no policy after"):
        load(f"{a}@")
    with pytest.raises(SystemExit):
        main([str(a), "--rates", "x"])


def test_named_pairs_get_their_paired_margin(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    """``--vs A:B``: a margin the standard four do not print (e.g. a baseline + pieces against itself)."""
    path = tmp_path / "x.json"
    path.write_text(json.dumps({"config": {"mode": "colocated"}, "results": _rows(False)}))
    assert main([str(path), "--vs", "lmetric+pieces:smetric-paper,dynamo:lmetric"]) == 0
    out = capsys.readouterr().out
    assert "* lmetric+pieces vs smetric-paper: +17.8 %" in out  # (108+s) / (90+s), s = 10-12
    assert "* dynamo vs lmetric: -" in out.splitlines()  # dynamo did not run: no margin, no crash
    with pytest.raises(SystemExit):
        main([str(path), "--vs", "lmetric"])
