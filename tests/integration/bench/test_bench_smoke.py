"""`smetric bench --quick` end to end: emulator + real Envoy + picker (and the vllm-router peer)."""

from __future__ import annotations

import json
import os
import re
import shutil
import signal
import subprocess
import sys
import time
from pathlib import Path

import pytest

pytestmark = pytest.mark.integration

TRACE = Path(__file__).resolve().parents[3].parent / "shared" / "traces" / "claude-code-agentic.jsonl.gz"


def _listening_ports() -> set[int]:
    """Local ports some socket on this box listens on (/proc/net/tcp{,6}, state 0A = LISTEN).

    Not "can this process bind the port": a stopped server leaves its closed connections in
    TIME_WAIT for a minute, and a plain bind() refuses a port with TIME_WAIT sockets although
    nothing serves it any more (that made this check flaky under CI)."""
    ports: set[int] = set()
    for table in ("/proc/net/tcp", "/proc/net/tcp6"):
        try:
            rows = Path(table).read_text().splitlines()[1:]
        except OSError:
            continue
        for row in rows:
            fields = row.split()
            if len(fields) > 3 and fields[3] == "0A":
                ports.add(int(fields[1].rsplit(":", 1)[1], 16))
    return ports


def _assert_all_stopped(logs: Path) -> None:
    """Nothing refers to the log folder any more, and nothing listens on an emulator's ports."""
    assert _running_with(str(logs)) == []
    listening = _listening_ports()
    for log in logs.glob("**/emulator.log"):
        m = re.search(r"http://127\.0\.0\.1:(\d+)\.\.(\d+)", log.read_text())
        assert m is not None
        assert listening.isdisjoint(range(int(m.group(1)), int(m.group(2)) + 1))


def _running_with(fragment: str) -> list[int]:
    pids = []
    for entry in Path("/proc").iterdir():
        if not entry.name.isdigit():
            continue
        try:
            cmd = (entry / "cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
        except OSError:
            continue
        if fragment in cmd:
            pids.append(int(entry.name))
    return pids


def test_the_stopped_check_sees_a_listener_and_ignores_time_wait() -> None:
    """A live listener fails the check; a port with only TIME_WAIT left passes it although a
    plain bind() still refuses that port (the flake the check replaced)."""
    import socket

    server = socket.socket()
    server.bind(("127.0.0.1", 0))
    server.listen()
    port = server.getsockname()[1]
    assert port in _listening_ports()
    client = socket.create_connection(("127.0.0.1", port))
    conn, _ = server.accept()
    server.close()
    conn.close()  # the server side closes first: its end of the connection enters TIME_WAIT
    client.recv(1)
    client.close()
    assert port not in _listening_ports()
    probe = socket.socket()
    try:
        with pytest.raises(OSError):
            probe.bind(("127.0.0.1", port))
    finally:
        probe.close()


@pytest.mark.skipif(
    not TRACE.is_file() and not os.environ.get("SMETRIC_TRACES"), reason="agentic trace not found"
)
def test_quick_bench_runs_every_row_and_cleans_up(tmp_path: Path) -> None:
    # The quick preset (steady agents, its rows side by side at time x0.02) at one fixed rate (the
    # knee search is unit-tested), two seeds, a short window after a warm-up of half of it.
    out, plot, logs = tmp_path / "bench.json", tmp_path / "bench.png", tmp_path / "logs"
    argv = [sys.executable, "-m", "smetric.core.cli", "bench", "--quick", "--rates", "0.00124", "--duration", "600", "--warmup", "300",
            "--json", str(out), "--plot", str(plot), "--records", str(tmp_path / "r.jsonl"), "--log-dir", str(logs)]  # fmt: skip
    peer = bool(
        shutil.which("vllm-router", path=str(Path(sys.executable).parent)) or shutil.which("vllm-router")
    )
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=240)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-3000:]
    doc = json.loads(out.read_text())
    labels = [r["label"] for r in doc["results"]]
    assert (
        labels == ["smetric", "lmetric", "vllm-router:cache_aware"]
        if peer
        else labels == ["smetric", "lmetric"]
    )
    if not peer:
        assert "vllm-router is not installed" in proc.stdout
    assert set(doc["meta"]["time_accounting"]) >= {"split", "all_scaled"}
    assert doc["meta"]["seeds"] == [0, 1]
    assert doc["meta"]["arrivals"] == "agents" and doc["meta"]["warmup_s"] == 300
    assert [run["agents"] for run in doc["meta"]["runs"]] == [12, 12]
    for row in doc["results"]:
        assert row["status"] == "ok", row
        assert row["seeds"] == [0, 1] and row["rate"] == 0.00124
        for run in row["per_seed"]:  # every run's drift and its flag
            assert run["arrival_drift_ok"] == (abs(run["arrival_drift"]) <= 0.10)
        s = row["summary"]
        assert s["n_ok"] > 0 and s["n_ok"] >= 0.9 * s["n_sent"]
        assert 0.0 < s["local_hit_ratio"] <= 1.0  # engines' own prefix counters moved
        assert s["ttft_p50_s"] > 0 and s["tps_within_slo"] > 0 and s["tps_within_slo_spread"] is not None
        assert s["n_server_timed"] == s["n_ok"]  # the emulator's timing reached the client through the router
        assert s["tps_within_slo_all_scaled"] <= s["tps_within_slo"] + 1e-9
        assert s["cpu_router_ms"] > 0 and s["cpu_client_ms"] > 0 and s["cpu_engines_ms"] > 0  # /proc read
        assert s["cpu_box_share"] > 0
    assert plot.stat().st_size > 10_000
    assert "TPS in SLO" in proc.stdout and "verdict (TPS within SLO" in proc.stdout
    assert "progress: 6 of 6 runs done" in proc.stdout or "progress: 4 of 4 runs done" in proc.stdout
    assert doc["meta"]["timers"]["picker_refresh_model_s"] == pytest.approx(0.05 / 0.02)
    assert doc["meta"]["concurrent_rows"] and doc["meta"]["picker_units"] == "wall"
    lines = [json.loads(line) for line in (tmp_path / "r.jsonl").read_text().splitlines()]
    assert any(line["warmup"] for line in lines)  # every request is recorded, the warm-up's marked
    assert sum(1 for line in lines if not line["warmup"]) == sum(
        r["summary"]["n_sent"] for r in doc["results"]
    )
    _assert_all_stopped(logs)


def test_missing_envoy_is_a_clear_failure(tmp_path: Path) -> None:
    out = tmp_path / "b.json"
    argv = [sys.executable, "-m", "smetric.core.cli", "bench", "--quick", "--policies", "round-robin", "--peer", "none",
            "--rates", "1", "--seeds", "1", "--duration", "20", "--envoy", "/nonexistent/envoy", "--json", str(out), "--log-dir", str(tmp_path)]  # fmt: skip
    proc = subprocess.run(argv, capture_output=True, text=True, timeout=120)
    assert proc.returncode == 2  # before any process starts
    assert proc.stdout.strip() == "smetric bench: Envoy binary /nonexistent/envoy not found", proc.stdout
    assert not out.exists()
    assert _running_with(str(tmp_path)) == []


@pytest.mark.skipif(
    not TRACE.is_file() and not os.environ.get("SMETRIC_TRACES"), reason="agentic trace not found"
)
@pytest.mark.parametrize("sig", [signal.SIGINT, signal.SIGTERM])
def test_ctrl_c_and_sigterm_stop_every_process(tmp_path: Path, sig: int) -> None:
    logs = tmp_path / "logs"
    argv = [sys.executable, "-m", "smetric.core.cli", "bench", "--quick", "--policies", "smetric",
            "--json", str(tmp_path / "b.json"), "--log-dir", str(logs)]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    try:
        deadline = time.monotonic() + 90
        while time.monotonic() < deadline and not list(logs.glob("*/smetric/envoy.json")):
            time.sleep(0.5)
        time.sleep(3)  # replaying by now
        proc.send_signal(sig)
        out, _ = proc.communicate(timeout=60)
    finally:
        if proc.poll() is None:
            proc.kill()
    assert proc.returncode == 128 + sig, out[-2000:]
    assert f"stopped by {signal.Signals(sig).name}; every started process was stopped" in out
    assert f"process logs in {logs}" in out
    assert list(logs.glob("**/emulator.log"))
    _assert_all_stopped(logs)
