"""Sweep machinery: paired statistics, the knee extension, the streamed sidecar and --resume,
seeds in the JSON, and the regime spec."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest

from smetric.sim import regimes as rg
from smetric.sim.cli import main
from smetric.sim.simulator import SimConfig
from smetric.sim.stats import mean_ci95, past_knee, summary, t975, verdict
from smetric.sim.stream import sidecar_path
from tests.support.sim_synth import write_agentic


def row(policy: str, seed: int, rate: float, tps: float) -> dict[str, Any]:
    return {"policy": policy, "seed": seed, "rate_multiplier": rate, "tps_within_slo": tps}


def test_mean_ci95_is_the_student_t_interval() -> None:
    m, ci = mean_ci95([1.0, 2.0, 3.0])
    assert m == 2.0
    assert ci is not None
    assert ci[0] == pytest.approx(2.0 - 4.303 * 1.0 / 3**0.5)
    assert mean_ci95([5.0]) == (5.0, None)
    assert t975(40) == 1.96
    assert verdict([0.1, 2.0]) == "win" and verdict([-1.0, 2.0]) == "tie" and verdict([-3, -1]) == "loss"


def test_summary_pairs_peaks_by_seed() -> None:
    rows = [
        row("a", 0, 1, 100), row("a", 0, 2, 120), row("a", 1, 1, 90), row("a", 1, 2, 110),
        row("b", 0, 1, 100), row("b", 0, 2, 110), row("b", 1, 1, 95), row("b", 1, 2, 100),
    ]  # fmt: skip
    s = {e["policy"]: e for e in summary(rows, "tps_within_slo", ["a", "b"], 0.2)}
    assert s["a"]["peak_tps_within_slo_per_seed"] == [120, 110]
    assert s["a"]["peak_tps_within_slo_mean"] == 115
    m = s["a"]["margins"]["b"]
    assert m["diffs"] == [10, 10] and m["mean"] == 10
    assert m["ci95"] == [10, 10]  # identical paired differences: zero-width interval
    assert m["pct"] == pytest.approx([100 * 10 / 110, 100 * 10 / 100])
    assert s["b"]["margins"]["a"]["mean"] == -10
    assert s["a"]["past_knee_per_seed"] == [False, False]


def test_past_knee_needs_a_drop_of_the_given_fraction() -> None:
    curve = [row("a", 0, 1, 100), row("a", 0, 2, 150), row("a", 0, 3, 125)]
    assert not past_knee(curve, "tps_within_slo", 0.2)
    assert past_knee([*curve, row("a", 0, 4, 119)], "tps_within_slo", 0.2)


def tiny(tmp_path: Path) -> list[str]:
    trace = tmp_path / "tiny.jsonl.gz"
    write_agentic(trace)
    return ["--trace", str(trace), "--instances", "2", "--policies", "smetric,round-robin",
            "--rates", "1,3", "--base-rate", "0.2", "--warmup-s", "0", "--measure-s", "120"]  # fmt: skip


def test_seeds_summary_and_extension_past_the_knee(tmp_path: Path) -> None:
    out = tmp_path / "r.json"
    assert main([*tiny(tmp_path), "--seeds", "0,1,2", "--workers", "1", "--json", str(out)]) == 0
    doc = json.loads(out.read_text())
    assert doc["config"]["seeds"] == [0, 1, 2]
    assert {r["seed"] for r in doc["results"]} == {0, 1, 2}
    summ = {e["policy"]: e for e in doc["summary"]}
    assert set(summ) == {"smetric", "round-robin"}
    e = summ["smetric"]
    assert len(e["peak_tps_within_slo_per_seed"]) == 3
    lo, hi = e["peak_tps_within_slo_ci95"]
    assert lo <= e["peak_tps_within_slo_mean"] <= hi
    assert len(e["margins"]["round-robin"]["diffs"]) == 3
    # each curve was extended until it fell 20 % below its peak or ran out of extensions
    for p in ("smetric", "round-robin"):
        for seed in (0, 1, 2):
            rates = sorted(
                r["rate_multiplier"] for r in doc["results"] if (r["policy"], r["seed"]) == (p, seed)
            )
            assert {1.0, 3.0} <= set(rates)
            knee = summ[p]["past_knee_per_seed"][seed]
            assert knee or len(rates) == 2 + doc["config"]["max_extensions"]


def test_json_is_reproducible_and_resume_skips_streamed_runs(tmp_path: Path) -> None:
    args = [*tiny(tmp_path), "--seeds", "0,1", "--no-extend-past-knee"]
    a, b = tmp_path / "a.json", tmp_path / "b.json"
    assert main([*args, "--workers", "1", "--json", str(a)]) == 0
    assert main([*args, "--workers", "2", "--json", str(b)]) == 0
    assert a.read_bytes() == b.read_bytes()  # pool vs inline: byte-identical
    side = sidecar_path(b)
    lines = side.read_text().splitlines()
    assert len(lines) == 1 + 8 and json.loads(lines[0])["format"].startswith("smetric-sim-runs")
    # interrupt: keep the header, three runs and a torn line; --resume runs only the other five
    side.write_text("\n".join(lines[:4]) + '\n{"key": ["", "smet')
    assert main([*args, "--workers", "1", "--json", str(b), "--resume"]) == 0
    assert a.read_bytes() == b.read_bytes()
    assert len(side.read_text().splitlines()) == 1 + 8
    # a changed sweep refuses the old sidecar
    assert main([*tiny(tmp_path), "--seeds", "0", "--workers", "1", "--json", str(b), "--resume"]) == 2
    assert main([*args, "--resume"]) == 2  # --resume without --json


def test_regime_spec_applies_overrides() -> None:
    base = SimConfig(instances=16)
    by = {r.name: r.apply(base) for r in rg.DEFAULT_REGIMES}
    assert by["default"] == base
    assert base.global_load_gbit_s is not None
    assert by["load-0.5x"].global_load_gbit_s == pytest.approx(base.global_load_gbit_s / 2)
    assert by["load-2x"].global_load_gbit_s == pytest.approx(base.global_load_gbit_s * 2)
    assert by["load-line-rate"].global_load_gbit_s is None
    assert by["hbm-141gb"].preset_name.endswith("gpu=h20-3e")
    assert by["tier-none"].global_tier == "none" and by["tier-small"].global_tier == "small"
    assert by["kv-fp8"].kv_dtype == "fp8"
    with pytest.raises(ValueError):
        rg.regimes_by_name("default,nope")


def test_regime_map_writes_cells_and_heat_map(tmp_path: Path) -> None:
    out, png = tmp_path / "map.json", tmp_path / "map.png"
    argv = [*tiny(tmp_path), "--regime-map", "--regimes", "default,tier-none", "--seeds", "0,1",
            "--no-extend-past-knee", "--workers", "1", "--json", str(out), "--plot", str(png)]  # fmt: skip
    assert main(argv) == 0
    doc = json.loads(out.read_text())
    cells = {c["regime"]: c for c in doc["regime_map"]}
    assert set(cells) == {"default", "tier-none"}
    assert cells["default"]["best_baseline"] == "round-robin"
    assert "margin_over_best_baseline_pct" in cells["default"]
    assert {r["regime"] for r in doc["results"]} == {"default", "tier-none"}
    assert [r["name"] for r in doc["config"]["regimes"]] == ["default", "tier-none"]
    assert png.stat().st_size > 10_000


def test_extensions_go_up_until_the_drop_and_down_when_the_peak_is_the_lowest_rate() -> None:
    from smetric.sim.sweep import RunKey, Setting, SweepSpec, WorkloadSpec, extensions

    setting = Setting("", WorkloadSpec("t"), SimConfig(instances=2))
    spec = SweepSpec((setting,), ("a", "b"), (1.0, 2.0, 3.0), seeds=(0,))
    tps = {"a": {1.0: 100, 2.0: 200, 3.0: 190}, "b": {1.0: 300, 2.0: 200, 3.0: 100}}
    done = {RunKey("", p, 0, m): row(p, 0, m, v) for p, c in tps.items() for m, v in c.items()}
    nxt = {t.key.policy: t.key.rate_multiplier for t in extensions(spec, done)}
    assert nxt == {"a": 4.0, "b": 0.6}  # a: not 20 % below its peak yet; b: peak at the lowest rate
    done[RunKey("", "a", 0, 4.0)] = row("a", 0, 4.0, 150)  # now 25 % below the peak
    done[RunKey("", "b", 0, 0.6)] = row("b", 0, 0.6, 250)
    assert extensions(spec, done) == []
    assert extensions(SweepSpec((setting,), ("a",), (1.0, 2.0, 3.0), extend_past_knee=False), done) == []


def test_resume_refuses_rows_written_by_other_simulator_code(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A default changed in the code (not spelled out in the config, e.g. a flow-control setting)
    changes the rows: --resume must not mix rows of the old code with the new."""
    args = [*tiny(tmp_path), "--seeds", "0", "--no-extend-past-knee", "--workers", "1"]
    out = tmp_path / "a.json"
    assert main([*args, "--json", str(out)]) == 0
    assert main([*args, "--json", str(out), "--resume"]) == 0  # the same code: resumed
    monkeypatch.setattr("smetric.sim.driver.code_digest", lambda: "other-code")
    assert main([*args, "--json", str(out), "--resume"]) == 2


def test_code_digest_follows_the_sources(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    from smetric.sim.stream import code_digest

    pkg = tmp_path / "digestpkg"
    pkg.mkdir()
    (pkg / "__init__.py").write_text("")
    (pkg / "m.py").write_text("X = 1\n")
    monkeypatch.syspath_prepend(str(tmp_path))
    before = code_digest(("digestpkg",))
    assert code_digest(("digestpkg",)) == before
    (pkg / "m.py").write_text("X = 2\n")
    assert code_digest(("digestpkg",)) != before
    assert code_digest() != before  # the default packages exist and are hashed
