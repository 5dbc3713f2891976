"""``python -m smetric.bench.replica_restart --signal TERM|KILL``: what one picker replica's death
costs the requests. Two precise pickers behind one Envoy ext_proc cluster, 8 agent sessions sending turns back to back for ``--seconds``; at ``--at`` seconds one
replica gets the signal, and it is started again ``--down`` seconds later. Prints the status counts
of every request (a connection error counts under its exception name).
"""

from __future__ import annotations

import argparse
import asyncio
import json
import os
import signal
import sys
import tempfile
import time
from collections import Counter
from collections.abc import Sequence
from pathlib import Path

import aiohttp

from smetric.bench.procs import BenchError, Supervisor, stopped
from smetric.bench.replicas import MODEL, conversation, start_envoy, start_pickers
from smetric.bench.stacks import ClusterSpec, start_cluster
from smetric.core.stopping import Interrupted, run_until_signalled


async def run(sig: signal.Signals, seconds: float, at_s: float, down_s: float, work: Path) -> Counter[str]:
    codes: Counter[str] = Counter()
    async with Supervisor(work / "logs") as sup:
        cluster = await start_cluster(
            sup, ClusterSpec(3, "qwen3-30b-h20", 0.1, 0, 16, "0", MODEL, global_tier="none")
        )
        ports = await start_pickers(
            sup, work, cluster.endpoints, cluster.kv_event_endpoints, 2, "precise", "smetric"
        )
        url = await start_envoy(sup, work, ports, cluster.endpoints)
        await asyncio.sleep(2.0)
        stop = time.monotonic() + seconds
        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=60)) as http:

            async def agent(i: int) -> None:
                t = 0
                while time.monotonic() < stop:
                    body = json.dumps(conversation(f"s{i}", t % 6)).encode()
                    try:
                        async with http.post(url + "/v1/chat/completions", data=body,
                                             headers={"content-type": "application/json"}) as r:  # fmt: skip
                            await r.read()
                            codes[str(r.status)] += 1
                    except aiohttp.ClientError as exc:
                        codes[type(exc).__name__] += 1
                    t += 1

            async def fault() -> None:
                await asyncio.sleep(at_s)
                os.kill(sup.children["picker1"].pid, sig)
                await sup.stop("picker1")
                await asyncio.sleep(down_s)
                await restart_picker1(sup, work, ports[1])  # the port the gateway's cluster lists

            await asyncio.gather(fault(), *(agent(i) for i in range(8)))
    return codes


async def restart_picker1(sup: Supervisor, work: Path, grpc_port: int) -> None:
    """``picker1`` again on ``grpc_port`` (new health and metrics ports), as start_pickers ran it."""
    from smetric.bench.procs import free_port
    from smetric.bench.stacks import HOST, smetric_argv, wait_grpc_serving

    health, metrics = free_port(), free_port()
    argv = [
        *smetric_argv("epp"),
        f"--endpoints=@{work / 'endpoints.yaml'}",
        f"--config={work / 'picker.yaml'}",
        "--prefix-index=precise",
        f"--grpc-port={grpc_port}",
        f"--grpc-health-port={health}",
        f"--metrics-port={metrics}",
        "--bind-address=127.0.0.1",
        "--secure-serving=false",
        "--log-level=warning",
    ]
    await sup.start("picker1", argv, env={"PYTHONHASHSEED": "0"})
    await wait_grpc_serving(f"{HOST}:{health}", sup, 60.0, "picker1")


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(
        prog="python -m smetric.bench.replica_restart", description=__doc__.split("\n\n")[0]
    )
    p.add_argument("--signal", choices=("TERM", "KILL"), default="KILL")
    p.add_argument("--seconds", type=float, default=12.0, help="length of the load")
    p.add_argument("--at", type=float, default=3.0, help="when the replica gets the signal")
    p.add_argument("--down", type=float, default=1.0, help="how long it stays down")
    a = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    sig = signal.SIGTERM if a.signal == "TERM" else signal.SIGKILL
    try:
        with tempfile.TemporaryDirectory(prefix="smetric-replica-restart-") as tmp:
            codes = run_until_signalled(run(sig, a.seconds, a.at, a.down, Path(tmp)))
    except BenchError as exc:
        print(f"replica_restart: {exc}", file=sys.stderr)
        return 2
    except Interrupted as exc:  # SIGTERM / SIGINT: the stack was stopped
        return stopped("replica_restart", exc)
    total = sum(codes.values())
    print(
        f"SIG{a.signal} of 1 of 2 precise replicas: {total} requests, "
        + ", ".join(f"{k}: {v}" for k, v in sorted(codes.items()))
    )
    return 0


if __name__ == "__main__":
    sys.exit(main())
