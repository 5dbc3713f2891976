"""Bench output: JSON without NaN, Markdown rows for ok and failed policies, a PNG figure."""

from __future__ import annotations

import dataclasses
import json
from pathlib import Path

from smetric.bench.metrics import Summary
from smetric.bench.report import PolicyResult, to_json, to_markdown, write_plot

NAN = float("nan")


def _summary(**over: float) -> Summary:
    values = {f.name: 1.0 for f in dataclasses.fields(Summary)}
    values.update(n_sent=10, n_ok=9, n_failed=1, n_not_sent=0, local_hit_ratio=NAN)
    values.update(over)
    return Summary(**values)  # type: ignore[arg-type]


ROWS = [
    PolicyResult("smetric", "envoy+smetric-epp", "smetric", "ok", "", _summary(tps_within_slo=12.5)),
    PolicyResult("vllm-router:kv_aware", "vllm-router", "kv_aware", "failed", "vllm-router is not installed"),
]


def test_json_has_no_nan_and_keeps_failures() -> None:
    doc = json.loads(to_json(ROWS, {"seed": 0}))
    assert doc["meta"] == {"seed": 0}
    assert doc["results"][0]["summary"]["local_hit_ratio"] is None
    assert doc["results"][1]["status"] == "failed" and doc["results"][1]["summary"] is None


def test_markdown_rows() -> None:
    md = to_markdown(ROWS).splitlines()
    assert len(md) == 4
    assert md[2].startswith("| smetric | envoy+smetric-epp | 12.5 |") and "| - |" in md[2]
    assert "failed: vllm-router is not installed" in md[3]


def test_plot_is_written(tmp_path: Path) -> None:
    out = tmp_path / "b.png"
    write_plot(out, ROWS, "test")
    assert out.read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
