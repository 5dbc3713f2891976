"""What the data-path benchmarks share (``picker_latency.py``, ``picker_side_by_side.py``): the
percentile rule and summary, the agentic request body, child processes and one timed POST."""

from __future__ import annotations

import os
import random
import statistics
import subprocess
import time
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import orjson

ROOT = Path(__file__).resolve().parents[4]


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


@dataclass
class Child:
    proc: subprocess.Popen[bytes]

    def stop(self) -> None:
        if self.proc.poll() is None:
            self.proc.terminate()
            try:
                self.proc.wait(10)
            except subprocess.TimeoutExpired:
                self.proc.kill()


def spawn(args: list[str], wait_ready: bool = True) -> Child:
    env = {**os.environ, "PYTHONUNBUFFERED": "1"}
    proc = subprocess.Popen(args, stdout=subprocess.PIPE, stderr=subprocess.DEVNULL, env=env, cwd=ROOT)
    if wait_ready:
        assert proc.stdout is not None
        line = proc.stdout.readline()
        if b"ready" not in line:
            proc.kill()
            raise RuntimeError(f"{args} did not start")
    return Child(proc)


async def timed_post(session: aiohttp.ClientSession, url: str, body: bytes) -> float:
    t0 = time.perf_counter()
    async with session.post(url, data=body, headers={"content-type": "application/json"}) as r:
        await r.read()
        if r.status != 200:
            raise RuntimeError(f"{url}: HTTP {r.status}")
    return time.perf_counter() - t0
