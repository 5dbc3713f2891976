"""The differential harness end to end, short: one policy through smetric bench (emulator + real
Envoy + picker with its decision log) and through the simulator, matched request by request."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

TRACE = Path(__file__).resolve().parents[3].parent / "shared" / "traces" / "claude-code-agentic.jsonl.gz"


@pytest.mark.skipif(
    not TRACE.is_file() and not os.environ.get("SMETRIC_TRACES"), reason="agentic trace not found"
)
def test_differential_matches_the_bench_requests_in_the_simulator(tmp_path: Path) -> None:
    out = tmp_path / "diff.json"
    trace = [] if os.environ.get("SMETRIC_TRACES") else ["--trace", str(TRACE)]
    cmd = [sys.executable, "-m", "smetric.bench.differential_run", "--policies", "lmetric", *trace,
           "--bench-dir", str(tmp_path / "bench"), "--json", str(out),
           "--bench-arg=--warmup=0", "--bench-arg=--duration=600"]  # fmt: skip
    proc = subprocess.run(cmd, capture_output=True, text=True, timeout=600, check=False)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "Spearman" in proc.stdout
    res = json.loads(out.read_text())["policies"]["lmetric"]
    as_is = res["as is"]
    assert as_is["bench_sent"] > 0
    # the bench's ids (<session>~a<agent>.<n>#<turn>) are rebuilt from the simulator's agents
    assert as_is["matched"] >= 0.9 * as_is["bench_sent"]
    for variant in ("as is", "bench's loop"):
        r = res[variant]
        assert 0.0 <= r["agreement"] <= 1.0
        assert sum(r["causes"].values()) == r["matched"] - r["agree"]
    assert res["bench_loop_delay_model_s"]["n"] > 0
