"""`smetric simulate --cluster`: a local Dask cluster of 2 workers started inside the test runs a
small sweep whose JSON is byte-identical to the local run's; --resume on the cluster skips the
streamed runs; a sweep survives a worker that dies mid-sweep."""

from __future__ import annotations

import contextlib
import json
import os
import signal
import socket
import subprocess
import sys
import time
from pathlib import Path

import pytest

from smetric.sim.cli import main
from smetric.sim.stream import sidecar_path
from tests.support.proctree import descendants, kill_all, stopped_cleanly
from tests.support.sim_synth import write_agentic

pytestmark = [pytest.mark.integration, pytest.mark.slow]


def _engine_or_skip() -> None:
    try:
        import distributed  # noqa: F401
    except ImportError as exc:  # pragma: no cover - the [test] extra installs it
        pytest.skip(f"Dask distributed not installed ([cluster] extra): {exc}")
    try:
        socket.socket(socket.AF_INET, socket.SOCK_STREAM).close()
    except OSError as exc:  # pragma: no cover
        pytest.skip(f"no TCP sockets here, a Dask cluster cannot start: {exc}")


def args(tmp_path: Path) -> list[str]:
    trace = tmp_path / "tiny.jsonl.gz"
    write_agentic(trace, families=6)
    return ["--trace", str(trace), "--instances", "2", "--policies", "smetric,dynamo,round-robin",
            "--rates", "1,3", "--base-rate", "0.2", "--warmup-s", "60", "--measure-s", "240",
            "--seeds", "0,1"]  # fmt: skip


def test_cluster_json_is_byte_identical_to_local_and_resume_works(tmp_path: Path) -> None:
    _engine_or_skip()
    a = args(tmp_path)
    local, remote = tmp_path / "local.json", tmp_path / "cluster.json"
    assert main([*a, "--workers", "1", "--json", str(local)]) == 0
    assert main([*a, "--cluster", "local:2", "--json", str(remote)]) == 0
    assert remote.read_bytes() == local.read_bytes()
    doc = json.loads(remote.read_text())
    assert len(doc["results"]) >= 12 and {r["seed"] for r in doc["results"]} == {0, 1}

    side = sidecar_path(remote)
    lines = side.read_text().splitlines()
    n_runs = len(lines) - 1
    side.write_text("\n".join(lines[: 1 + n_runs // 2]) + "\n")  # an interrupted sweep
    assert main([*a, "--cluster", "local:2", "--json", str(remote), "--resume"]) == 0
    assert remote.read_bytes() == local.read_bytes()
    assert len(side.read_text().splitlines()) == 1 + n_runs


def test_bad_cluster_address_is_a_clean_error(tmp_path: Path) -> None:
    _engine_or_skip()
    assert main([*args(tmp_path), "--cluster", "local:zero", "--json", str(tmp_path / "x.json")]) == 2


def test_a_lost_worker_is_replaced_and_its_runs_rerun(tmp_path: Path) -> None:
    """Kill one of two workers while runs are in flight: the sweep still completes, identically."""
    _engine_or_skip()
    from distributed import Client, LocalCluster

    from smetric.sim.cluster import DaskExecutor

    a = args(tmp_path)
    local = tmp_path / "local.json"
    assert main([*a, "--workers", "1", "--json", str(local)]) == 0

    cluster = LocalCluster(n_workers=2, threads_per_worker=1, processes=True, dashboard_address=None)
    try:
        address = cluster.scheduler_address
        killed: list[str] = []
        real = DaskExecutor.run

        def run_and_kill(self: DaskExecutor, tasks):  # type: ignore[no-untyped-def]
            for n, item in enumerate(real(self, tasks)):
                if n == 0 and not killed:
                    with Client(address) as c:
                        busy = [w for w, ts in c.processing().items() if ts]
                        victim = sorted(busy or c.scheduler_info()["workers"])[0]
                        killed.append(victim)
                        with contextlib.suppress(Exception):  # the worker dies mid-call
                            c.run(os._exit, 1, workers=[victim])  # abrupt: its runs are lost
                yield item

        mp = pytest.MonkeyPatch()
        mp.setattr(DaskExecutor, "run", run_and_kill)
        try:
            remote = tmp_path / "remote.json"
            assert main([*a, "--cluster", address, "--json", str(remote)]) == 0
        finally:
            mp.undo()
        assert killed
        assert remote.read_bytes() == local.read_bytes()
    finally:
        cluster.close()


def test_regime_map_on_the_cluster_matches_local(tmp_path: Path) -> None:
    _engine_or_skip()
    a = [*args(tmp_path), "--regime-map", "--regimes", "default,kv-fp8", "--no-extend-past-knee"]
    local, remote = tmp_path / "local.json", tmp_path / "cluster.json"
    assert main([*a, "--workers", "1", "--json", str(local)]) == 0
    assert main([*a, "--cluster", "local:2", "--json", str(remote)]) == 0
    assert remote.read_bytes() == local.read_bytes()
    assert {c["regime"] for c in json.loads(remote.read_text())["regime_map"]} == {"default", "kv-fp8"}


@pytest.mark.parametrize("sig", [signal.SIGTERM, signal.SIGINT])
def test_a_signal_stops_the_local_cluster_and_keeps_the_streamed_runs(tmp_path: Path, sig: int) -> None:
    """SIGTERM (``timeout``, CI, a pod stop) and SIGINT end ``--cluster local:N`` with its workers,
    after the first runs were streamed (they stay for --resume)."""
    _engine_or_skip()
    trace = tmp_path / "bigger.jsonl.gz"
    write_agentic(trace, families=80)
    out = tmp_path / "cluster.json"
    argv = [sys.executable, "-m", "smetric.sim.cli", "--trace", str(trace), "--instances", "4",
            "--policies", "smetric,dynamo,round-robin,lmetric", "--rates", "1,2,3,4,5,6", "--base-rate", "0.2",
            "--warmup-s", "300", "--measure-s", "3600", "--seeds", ",".join(map(str, range(16))),
            "--cluster", "local:2", "--json", str(out)]  # fmt: skip
    # 384 runs: on an idle box the 96 of four seeds could all finish between the first streamed runs
    # and the signal, so the command ended 0 before it was stopped
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    seen: set[int] = set()
    try:
        deadline = time.monotonic() + 180
        side = sidecar_path(out)
        while time.monotonic() < deadline:  # workers up and the first runs streamed
            assert proc.poll() is None, proc.communicate()[0][-2000:]
            seen |= descendants(proc.pid)
            if len(seen) >= 2 and side.exists() and len(side.read_text().splitlines()) >= 2:
                break
            time.sleep(0.3)
        proc.send_signal(sig)
        left = stopped_cleanly(proc, seen, 90.0)
        text = proc.communicate()[0]
        assert left == {}, left
        assert proc.returncode == 128 + sig, text[-2000:]
        assert f"stopped by {signal.Signals(sig).name}" in text and "--resume" in text
        assert len(side.read_text().splitlines()) >= 2
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_all(seen)
