"""smetric.bench.latency.side_by_side end to end (one short run): every path answers, rows and ratios."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def test_one_short_run_reports_every_path(tmp_path: Path) -> None:
    out = tmp_path / "side.json"
    proc = subprocess.run(
        [sys.executable, "-m", "smetric.bench.latency.side_by_side", "--runs", "1", "--requests", "6",
         "--out", str(out)],
        capture_output=True, text=True, timeout=240, cwd=ROOT,
    )  # fmt: skip
    assert proc.returncode == 0, proc.stdout[-2000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["runs"] == 1 and len(doc["aggregate"]) == 3
    row = doc["per_run"][0]["sizes"][1]
    assert row["body_bytes"] == 128 * 1024
    for path in ("backend", "envoy", "envoy+noop", "envoy+picker"):
        assert row[path]["n"] == 6 - 6 // 10 and row[path]["p50_ms"] > 0
    assert row["envoy+picker"]["cpu_s_per_1000"] > 0
    if "vllm-router" in row:  # the [bench] extra is installed
        assert row["ratio_added_p50"] is None or row["ratio_added_p50"] > 0
    else:
        assert "vllm-router is not installed" in proc.stdout
    assert "| 128 KiB | envoy+picker |" in proc.stdout
