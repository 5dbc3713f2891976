"""``python -m smetric.bench.replicas``: follow-up stickiness with 1, 2 and 4 picker replicas.

Several ``smetric-epp`` processes sit behind ONE Envoy ext_proc cluster (each request's ext_proc
stream goes to one of them, round robin), in front of emulated engines that publish KV events.
Agent sessions send multi-turn conversations; a follow-up turn is *sticky* when it is served by the
engine that served the session's previous turn. Each replica's ledger and, with the approximate
index, its prefix index see only the requests it routed; with the precise index every replica reads
the same KV events. One table row per (index, replicas): sticky follow-ups, their share relative to
one replica, and the requests' p50 latency.

    python -m smetric.bench.replicas --pickers 1,2,4 --index approximate,precise --json out.json
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import aiohttp
import yaml

from smetric.bench.procs import BenchError, Supervisor, check_writable, free_port, stopped, wait_http_ok
from smetric.bench.stacks import HOST, ClusterSpec, smetric_argv, start_cluster, wait_grpc_serving
from smetric.core.stopping import Interrupted, run_until_signalled

MODEL = "qwen3-30b"


@dataclass(frozen=True, slots=True)
class ReplicaRun:
    index: str
    pickers: int
    policy: str
    sessions: int
    turns: int
    sticky: int
    followups: int
    failed: int
    p50_s: float

    @property
    def share(self) -> float:
        return self.sticky / self.followups if self.followups else 0.0


def conversation(session: str, turns: int, filler: int = 60) -> dict[str, object]:
    """An agent session after ``turns`` tool steps: each adds a tool output and the model's answer."""
    messages: list[dict[str, str]] = [{"role": "system", "content": f"[{session}] coding agent. " * 40}]
    for t in range(turns):
        messages.append({"role": "user", "content": f"tool output {t} of {session}: " + "log line " * filler})
        messages.append({"role": "assistant", "content": f"step {t} done for {session}"})
    messages.append({"role": "user", "content": f"continue {session}"})
    return {"model": MODEL, "messages": messages, "stream": True, "max_tokens": 8}


async def start_pickers(
    sup: Supervisor,
    work: Path,
    endpoints: Sequence[str],
    kv_endpoints: Sequence[str],
    n: int,
    index: str,
    policy: str,
    extra_flags: Sequence[str] = (),
    timeout_s: float = 60.0,
) -> list[int]:
    """``n`` pickers on the same pool; returns their gRPC ports (names ``picker0``..)."""
    pool = work / "endpoints.yaml"
    pool.write_text(
        yaml.safe_dump([{"address": e, "kv_events": k} for e, k in zip(endpoints, kv_endpoints, strict=True)])
    )
    config = work / "picker.yaml"
    config.write_text(yaml.safe_dump({"policy": {"name": policy}}))
    ports = []
    for i in range(n):
        grpc_port, health_port, metrics_port = free_port(), free_port(), free_port()
        argv = [
            *smetric_argv("epp"),
            f"--endpoints=@{pool}",
            f"--config={config}",
            f"--prefix-index={index}",
            f"--grpc-port={grpc_port}",
            f"--grpc-health-port={health_port}",
            f"--metrics-port={metrics_port}",
            "--bind-address=127.0.0.1",
            "--secure-serving=false",
            "--log-level=warning",
            *extra_flags,
        ]
        await sup.start(f"picker{i}", argv, env={"PYTHONHASHSEED": "0"})
        await wait_grpc_serving(f"{HOST}:{health_port}", sup, timeout_s, f"picker{i}")
        ports.append(grpc_port)
    return ports


async def start_envoy(
    sup: Supervisor, work: Path, picker_ports: Sequence[int], pool: Sequence[str], **options: Any
) -> str:
    """One Envoy whose ext_proc cluster holds every picker (``options``: more EnvoyOptions fields);
    returns the gateway URL."""
    from smetric.epp.envoy import EnvoyOptions, bootstrap, envoy_binary

    listen_port, admin_port = free_port(), free_port()
    envoy_options = EnvoyOptions(
        listen_port=listen_port,
        admin_port=admin_port,
        picker_port=picker_ports[0],
        more_picker_ports=tuple(picker_ports[1:]),
        pool_endpoints=tuple(pool),
        served_by_header=True,
        **options,
    )
    path = work / "envoy.json"
    path.write_text(json.dumps(bootstrap(envoy_options)))
    argv = [str(envoy_binary()), "-c", str(path), "--disable-hot-restart", "--log-level", "error",
            "--concurrency", "1"]  # fmt: skip
    await sup.start("envoy", argv)
    await wait_http_ok(f"http://{HOST}:{admin_port}/ready", sup, 60.0, "envoy")
    return f"http://{HOST}:{listen_port}"


async def sessions_run(url: str, sessions: int, turns: int, tag: str) -> tuple[int, int, int, list[float]]:
    """``sessions`` concurrent agents, ``turns`` turns each; returns (sticky, follow-ups, failed,
    latencies)."""
    sticky = followups = failed = 0
    latencies: list[float] = []
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:

        async def agent(i: int) -> None:
            nonlocal sticky, followups, failed
            prev = ""
            for t in range(turns):
                t0 = time.monotonic()
                body = json.dumps(conversation(f"{tag}-s{i}", t)).encode()
                async with http.post(url + "/v1/chat/completions", data=body,
                                     headers={"content-type": "application/json"}) as r:  # fmt: skip
                    await r.read()
                    served = r.headers.get("x-smetric-served-by", "")
                    if r.status != 200:
                        failed += 1
                latencies.append(time.monotonic() - t0)
                if t > 0:
                    followups += 1
                    sticky += served == prev and bool(served)
                prev = served

        await asyncio.gather(*(agent(i) for i in range(sessions)))
    return sticky, followups, failed, latencies


async def measure(
    pickers: int, index: str, policy: str, sessions: int, turns: int, instances: int, work: Path
) -> ReplicaRun:
    async with Supervisor(work / "logs") as sup:
        spec = ClusterSpec(instances, "qwen3-30b-h20", 0.1, 0, 16, "0", MODEL, global_tier="none")
        cluster = await start_cluster(sup, spec)
        ports = await start_pickers(
            sup, work, cluster.endpoints, cluster.kv_event_endpoints, pickers, index, policy
        )
        url = await start_envoy(sup, work, ports, cluster.endpoints)
        await asyncio.sleep(2.0)  # the pickers' first scrapes: every engine fresh
        sticky, followups, failed, lat = await sessions_run(url, sessions, turns, f"{index}{pickers}")
    lat.sort()
    return ReplicaRun(index, pickers, policy, sessions, turns, sticky, followups, failed, lat[len(lat) // 2])


def table(runs: Sequence[ReplicaRun]) -> str:
    one = {r.index: r.share for r in runs if r.pickers == 1}
    out = [
        "| index | pickers | sticky follow-ups | vs 1 picker | failed | p50 |",
        "|---|---|---|---|---|---|",
    ]
    for r in runs:
        base = one.get(r.index)
        rel = f"{(r.share - base) * 100:+.1f} pt" if base is not None else "-"
        out.append(f"| {r.index} | {r.pickers} | {r.sticky}/{r.followups} = {r.share:.0%} | {rel} | "
                   f"{r.failed} | {r.p50_s:.2f} s |")  # fmt: skip
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="python -m smetric.bench.replicas", description=__doc__.split("\n\n")[0])
    p.add_argument("--pickers", default="1,2,4", help="replica counts (comma-separated)")
    p.add_argument("--index", default="approximate,precise", help="prefix indexes (comma-separated)")
    p.add_argument("--policy", default="smetric", help="routing policy of every picker")
    p.add_argument("--sessions", type=int, default=24)
    p.add_argument("--turns", type=int, default=8)
    p.add_argument("--instances", type=int, default=4, help="emulated engines")
    p.add_argument("--json", default="", help="write the runs here")
    a = p.parse_args(list(sys.argv[1:] if argv is None else argv))

    async def measure_all() -> list[ReplicaRun]:
        runs: list[ReplicaRun] = []
        for index in a.index.split(","):
            for n in (int(x) for x in a.pickers.split(",")):
                with tempfile.TemporaryDirectory(prefix="smetric-replicas-") as tmp:
                    run = await measure(n, index, a.policy, a.sessions, a.turns, a.instances, Path(tmp))
                runs.append(run)
                print(f"  {index} x{n}: {run.sticky}/{run.followups} sticky", file=sys.stderr)
        return runs

    try:
        if a.json:  # before any stack starts
            check_writable("--json", Path(a.json))
        runs = run_until_signalled(measure_all())  # SIGTERM / SIGINT: every stack is stopped
    except BenchError as exc:
        print(f"replicas: {exc}", file=sys.stderr)
        return 2
    except Interrupted as exc:
        return stopped("replicas", exc)
    print(table(runs))
    if a.json:
        Path(a.json).write_text(json.dumps([{**asdict(r), "share": r.share} for r in runs], indent=2))
    return 0


if __name__ == "__main__":
    sys.exit(main())
