"""Bench output: JSON without NaN that keeps failed rows, Markdown rows for ok and failed policies,
a PNG figure — on the row report the bench writes."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from smetric.bench.metrics import Summary
from smetric.bench.report import PolicyResult
from smetric.bench.rowreport import plot_rows, rows_json, rows_markdown
from smetric.bench.sweep import Cell, aggregate

NAN = float("nan")


def _summary(**over: float) -> Summary:
    values = {f.name: 1.0 for f in dataclasses.fields(Summary)}
    values.update(n_sent=10, n_ok=9, n_failed=1, n_not_sent=0, local_hit_ratio=NAN)
    values.update(over)
    return Summary(**values)  # type: ignore[arg-type]


OK = PolicyResult("smetric", "envoy+smetric-epp", "smetric", "ok", "", _summary(tps_within_slo=12.5))
FAILED = PolicyResult(
    "vllm-router:kv_aware", "vllm-router", "kv_aware", "failed", "vllm-router is not installed"
)
ROWS = [aggregate([Cell(1.0, 0, r)], 1.0, r.label, "knee") for r in (OK, FAILED)]


def test_json_has_no_nan_and_keeps_failures() -> None:
    doc = json.loads(rows_json(ROWS, {"seed": 0}))
    assert doc["meta"] == {"seed": 0}
    assert doc["results"][0]["summary"]["local_hit_ratio"] is None
    assert doc["results"][1]["status"] == "failed" and doc["results"][1]["summary"] is None
    assert doc["results"][1]["note"] == "vllm-router is not installed"


def test_markdown_rows() -> None:
    md = rows_markdown(ROWS).splitlines()
    assert len(md) == 4
    assert "| smetric |" in md[2] and "| 12.5 |" in md[2] and "| - |" in md[2]
    assert "failed: vllm-router is not installed" in md[3]


def test_plot_is_written(tmp_path: Path) -> None:
    out = tmp_path / "b.png"
    plot_rows(out, ROWS, "test", knee=1.0)
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
