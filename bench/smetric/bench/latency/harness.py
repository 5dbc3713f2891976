"""What the picker's data-path benchmarks share (:mod:`.picker`, :mod:`.side_by_side`): the stack's
start-up (child processes, the real picker process, Envoys), the agentic request bodies, timing
(one POST, every path in rotation, closed loops climbing until p99 doubles) and the tables they
print. The processes they start are :mod:`.servers`."""

from __future__ import annotations

import json
import os
import random
import select
import statistics
import subprocess
import sys
import time
from collections.abc import Awaitable, Callable, Iterable, Mapping, Sequence
from contextlib import AsyncExitStack
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson

from smetric.bench.procs import stop_child
from smetric.epp.envoy import EnvoyOptions, EnvoyProcess, free_port
from smetric.epp.obs.health import wait_serving

ROOT = Path(__file__).resolve().parents[4]
PY = sys.executable
SERVERS = "smetric.bench.latency.servers"  # python -m SERVERS KIND ...: the helper processes
SIZES = (8 * 1024, 128 * 1024, 1024 * 1024)  # request bodies: 8 KiB, 128 KiB, 1 MiB
CONCURRENCY = (1, 2, 4, 8, 16, 32, 64)  # the closed-loop levels, climbed until p99 doubles
START_S = 30.0  # a picker or ext_proc server not SERVING by then failed to start


# -- numbers -----------------------------------------------------------------------------------------


def pct(xs: Sequence[float], q: float) -> float:
    s = sorted(xs)
    return s[min(len(s) - 1, max(0, int(q * len(s) + 0.5) - 1))]


def summary_ms(xs: Sequence[float]) -> dict[str, float]:
    return {
        "p50_ms": round(pct(xs, 0.50) * 1e3, 3),
        "p99_ms": round(pct(xs, 0.99) * 1e3, 3),
        "mean_ms": round(statistics.fmean(xs) * 1e3, 3),
        "n": len(xs),
    }


# -- requests ----------------------------------------------------------------------------------------


def agent_body(rng: random.Random, session: int, turn: int, target_bytes: int) -> bytes:
    """An agentic chat request: shared system prompt, ``turn`` earlier tool rounds, padded to size."""
    system = f"[session {session}] You are a coding agent working in a repository. " * 60
    messages: list[dict[str, str]] = [{"role": "system", "content": system}]
    for t in range(turn):
        messages.append({"role": "user", "content": f"tool result {t}: " + "ok " * 200})
        messages.append({"role": "assistant", "content": f"step {t}: edit file " * 30})
    doc: dict[str, Any] = {"model": "m", "messages": messages, "stream": False}
    size = len(orjson.dumps(doc))
    pad = max(0, target_bytes - size - 40)
    messages.append({"role": "user", "content": "".join(rng.choice("abcdefgh \n") for _ in range(pad))})
    return orjson.dumps(doc)


def sized_bodies(size: int, n: int) -> list[bytes]:
    """``n`` agentic bodies of ``size`` bytes over 32 sessions and up to 3 earlier rounds, seeded by
    the size (the same bodies for every path and every run)."""
    rng = random.Random(size)
    return [agent_body(rng, i % 32, i % 4, size) for i in range(n)]


def chat_url(port: int) -> str:
    return f"http://127.0.0.1:{port}/v1/chat/completions"


# -- processes ---------------------------------------------------------------------------------------


@dataclass
class Child:
    proc: subprocess.Popen[bytes]

    def stop(self) -> None:
        stop_child(self.proc, 10.0)


def spawn(args: list[str], wait_ready: bool = True) -> Child:
    """A child process; ``wait_ready``: its first stdout line must say ``ready`` within
    :data:`START_S`."""
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    if wait_ready:
        assert proc.stdout is not None
        readable, _, _ = select.select([proc.stdout], [], [], START_S)
        line = proc.stdout.readline() if readable else b""
        if b"ready" not in line:
            stop_child(proc, 1.0)
            raise RuntimeError(f"{args} did not start")
    return Child(proc)


def spawn_server(stack: AsyncExitStack, kind: str, *args: str, wait_ready: bool = True) -> Child:
    """One of :mod:`.servers`' processes, stopped when ``stack`` closes."""
    child = spawn([PY, "-m", SERVERS, kind, *args], wait_ready=wait_ready)
    stack.callback(child.stop)
    return child


@dataclass(frozen=True)
class PickerProcess:
    grpc_port: int
    pid: int


async def start_picker(stack: AsyncExitStack, endpoint_ports: Sequence[int], *flags: str) -> PickerProcess:
    """The real ``smetric-epp`` (standalone discovery of the endpoints, /metrics scraping, approximate
    index) with ``flags`` added, SERVING on its gRPC health port; stopped when ``stack`` closes."""
    grpc_port, health_port, metrics_port = free_port(), free_port(), free_port()
    child = spawn(
        [
            PY, "-m", "smetric.epp.main",
            "--endpoints", ",".join(f"127.0.0.1:{p}" for p in endpoint_ports),
            "--grpc-port", str(grpc_port), "--grpc-health-port", str(health_port),
            "--metrics-port", str(metrics_port), "--log-level", "warning", "--secure-serving=false",
            *flags,
        ],
        wait_ready=False,
    )  # fmt: skip
    stack.callback(child.stop)
    await wait_serving(f"127.0.0.1:{health_port}", START_S)
    return PickerProcess(grpc_port, child.proc.pid)


def envoy_options(picker_port: int, **kw: Any) -> EnvoyOptions:
    """:class:`EnvoyOptions` in front of the ext_proc server on ``picker_port``, on free ports."""
    return EnvoyOptions(listen_port=free_port(), admin_port=free_port(), picker_port=picker_port, **kw)


async def start_envoy(stack: AsyncExitStack, config: dict[str, Any], **kw: Any) -> int:
    """An Envoy running ``config`` (a bootstrap) until ``stack`` closes; its pid."""
    envoy = EnvoyProcess(config, **kw)
    await stack.enter_async_context(envoy)
    assert envoy._proc is not None
    return envoy._proc.pid


# -- timing ------------------------------------------------------------------------------------------


async def timed_post(session: aiohttp.ClientSession, url: str, body: bytes) -> float:
    t0 = time.perf_counter()
    async with session.post(url, data=body, headers={"content-type": "application/json"}) as r:
        await r.read()
        if r.status != 200:
            raise RuntimeError(f"{url}: HTTP {r.status}")
    return time.perf_counter() - t0


async def rotate(
    session: aiohttp.ClientSession, urls: Mapping[str, str], bodies: Sequence[bytes]
) -> dict[str, list[float]]:
    """Each body sent to every path in turn, one request at a time, so all paths see the same
    machine state; the latencies by path."""
    times: dict[str, list[float]] = {name: [] for name in urls}
    for body in bodies:
        for name, url in urls.items():
            times[name].append(await timed_post(session, url, body))
    return times


async def climb(measure: Callable[[int], Awaitable[dict[str, Any]]]) -> dict[str, Any]:
    """``measure(concurrency)`` (a level with ``req_s`` and ``p99_ms``) at each of
    :data:`CONCURRENCY` until p99 exceeds twice the first level's; the highest rate before that."""
    levels: list[dict[str, Any]] = []
    for c in CONCURRENCY:
        level = await measure(c)
        levels.append(level)
        if level["p99_ms"] > 2 * levels[0]["p99_ms"]:
            break
    ok = [lv for lv in levels if lv["p99_ms"] <= 2 * levels[0]["p99_ms"]]
    return {"levels": levels, "max_req_s_before_p99_doubles": max(lv["req_s"] for lv in ok)}


# -- output ------------------------------------------------------------------------------------------


def table(header: Sequence[str], rows: Iterable[Sequence[object]]) -> str:
    """A Markdown table."""
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    lines += ["| " + " | ".join(str(cell) for cell in row) + " |" for row in rows]
    return "\n".join(lines)


def p50_p99(s: Mapping[str, Any], p50: str = "p50_ms", p99: str = "p99_ms") -> str:
    return f"{s[p50]} / {s[p99]} ms"


def write_json(path: Path | None, doc: object) -> None:
    if path is not None:
        path.write_text(json.dumps(doc, indent=2))
