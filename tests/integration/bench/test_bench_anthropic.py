"""`smetric bench --api anthropic`: the agentic trace replayed as Anthropic Messages traffic through
Envoy + the picker to the emulator (one policy row, one seed, a short window)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from prometheus_client.parser import text_string_to_metric_families

pytestmark = pytest.mark.integration

TRACE = Path(__file__).resolve().parents[3].parent / "shared" / "traces" / "claude-code-agentic.jsonl.gz"


@pytest.mark.skipif(
    not TRACE.is_file() and not os.environ.get("SMETRIC_TRACES"), reason="agentic trace not found"
)
def test_bench_replays_the_trace_as_anthropic_messages(tmp_path: Path) -> None:
    out, records = tmp_path / "bench.json", tmp_path / "r.jsonl"
    argv = [sys.executable, "-m", "smetric.core.cli", "bench", "--quick", "--api", "anthropic", "--rates", "0.02",
            "--duration", "300", "--seeds", "1", "--peer", "none", "--arrivals", "cold", "--policies", "smetric", "--json", str(out),
            "--records", str(records), "--log-dir", str(tmp_path / "logs")]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=180)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert doc["meta"]["api"] == "anthropic"
    (row,) = doc["results"]
    assert row["status"] == "ok", row
    s = row["summary"]
    assert s["n_ok"] > 0 and s["n_ok"] == s["n_sent"]
    assert 0.0 < s["local_hit_ratio"] <= 1.0 and s["ttft_p50_s"] > 0
    assert s["n_server_timed"] == s["n_ok"]  # message_delta's server timing reached the client
    outcomes = [json.loads(line)["outcome"] for line in records.read_text().splitlines() if line.strip()]
    assert len(outcomes) == s["n_sent"] and all(o["ok"] for o in outcomes)
    (router,) = (tmp_path / "logs").glob("**/router-metrics.txt")
    picker = {
        (x.name, x.labels.get("kind", "")): x.value
        for family in text_string_to_metric_families(router.read_text())
        for x in family.samples
    }
    # The picker timed every Anthropic stream and read its usage (message_start + message_delta).
    assert picker[("smetric_epp_ttft_seconds_count", "")] == len(outcomes)
    assert picker[("smetric_epp_usage_tokens_total", "prompt")] == sum(o["prompt_tokens"] for o in outcomes)
    assert picker[("smetric_epp_usage_tokens_total", "completion")] == sum(
        o["output_tokens"] for o in outcomes
    )
    assert picker[("smetric_epp_usage_tokens_total", "cached")] == sum(o["cached_tokens"] for o in outcomes)
