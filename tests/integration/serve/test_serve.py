"""``smetric serve`` end to end: the real ``openai`` and ``anthropic`` SDKs (and curl's request)
through the real Envoy and picker to emulated engines; a routing line per request on stdout;
SIGTERM and SIGINT stop every process it started."""

from __future__ import annotations

import queue
import re
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import anthropic
import openai
import pytest

from tests.support.proctree import cmdline, descendants, kill_all, stopped_cleanly, wait_for_descendant

pytestmark = pytest.mark.integration

MODEL = "emu/serve-model"
STARTUP_S = 120.0


@dataclass
class Served:
    proc: subprocess.Popen[str]
    url: str
    lines: queue.Queue[str]
    seen: set[int]

    def next_matching(self, pattern: str, timeout_s: float = 20.0) -> str:
        deadline = time.monotonic() + timeout_s
        while (left := deadline - time.monotonic()) > 0:
            try:
                line = self.lines.get(timeout=left)
            except queue.Empty:
                break
            if re.search(pattern, line):
                return line
        raise AssertionError(f"no line matching {pattern!r} within {timeout_s:g} s")


def _reader(stream: object, lines: queue.Queue[str]) -> None:
    for line in stream:  # type: ignore[attr-defined]
        lines.put(line.rstrip("\n"))


@pytest.fixture
def served(tmp_path: Path) -> Iterator[Served]:
    argv = [sys.executable, "-m", "smetric.bench.serve", "--engines", "2", "--port", "0", "--time-scale", "0.05",
            "--model", MODEL, "--policy", "smetric", "--log-dir", str(tmp_path / "logs")]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
    seen: set[int] = set()
    try:
        seen = wait_for_descendant(proc, "--disable-hot-restart", STARTUP_S)
        s = Served(proc, "", lines, seen)
        ready = s.next_matching(r"ready at http://", STARTUP_S)
        m = re.search(r"ready at (http://[\d.]+:\d+)", ready)
        assert m is not None, ready
        s.url = m.group(1)
        yield s
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        kill_all(seen)


def test_sdks_route_through_the_stack_and_sigterm_stops_everything(served: Served) -> None:
    gpt = openai.OpenAI(base_url=served.url + "/v1", api_key="unused", max_retries=0, timeout=60)
    reply = gpt.chat.completions.create(
        model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}]
    )
    assert reply.choices[0].message.content
    first = served.next_matching(r"-> engine\d")
    assert "reason=" in first and "cached=" in first and "policy=smetric" in first
    stream = gpt.chat.completions.create(
        model=MODEL, max_tokens=8, stream=True, messages=[{"role": "user", "content": "hi again"}]
    )
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices)
    served.next_matching(r"-> engine\d")
    claude = anthropic.Anthropic(base_url=served.url, api_key="unused", max_retries=0, timeout=60)
    msg = claude.messages.create(model=MODEL, max_tokens=8, messages=[{"role": "user", "content": "hi"}])
    assert msg.content[0].type == "text" and msg.content[0].text
    served.next_matching(r"-> engine\d")

    served.proc.send_signal(signal.SIGTERM)
    left = stopped_cleanly(served.proc, served.seen, 60.0)
    assert left == {}, left
    assert served.proc.returncode == 0
    served.next_matching(r"stopped by SIGTERM; every process it started was stopped", 5.0)


@pytest.mark.slow  # one more stack start (~40 s under load); SIGTERM is checked in the fast tier
def test_ctrl_c_stops_everything(served: Served) -> None:
    served.proc.send_signal(signal.SIGINT)
    left = stopped_cleanly(served.proc, served.seen, 60.0)
    assert left == {}, left
    assert served.proc.returncode == 0
    served.next_matching(r"stopped by SIGINT", 5.0)


def test_bad_options_are_one_line_before_anything_starts(tmp_path: Path) -> None:
    for args, expected in (
        (["--engines", "0"], "--engines must be 1..64"),
        (["--policy", "nope"], "unknown policy 'nope'"),
        (["--engine", "http://127.0.0.1:1/v1"], "give the server's http://host:port"),
        (["--envoy", str(tmp_path / "no-envoy")], "not found"),
    ):
        proc = subprocess.run(
            [sys.executable, "-m", "smetric.bench.serve", "--port", "0", *args],
            capture_output=True, text=True, timeout=60,
        )  # fmt: skip
        assert proc.returncode == 2, proc.stderr
        assert proc.stdout == "" and proc.stderr.count("\n") == 1 and expected in proc.stderr, proc.stderr


@pytest.mark.slow  # an emulator and a stack (~40 s under load)
def test_engine_urls_route_over_running_servers(tmp_path: Path) -> None:
    """``--engine URL``: no emulator of its own; the picker and Envoy in front of servers already
    running (here a separate ``smetric emulate``, as a vLLM server would be), the model read from
    their /v1/models."""
    from smetric.emulator.ports import free_port_block

    port = free_port_block(2)
    emu = subprocess.Popen(
        [sys.executable, "-m", "smetric.core.cli", "emulate", "--instances", "2", "--port", str(port),
         "--time-scale", "0.05", "--model", "emu/outside"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    argv = [sys.executable, "-m", "smetric.bench.serve", "--port", "0", "--log-dir", str(tmp_path / "logs"),
            "--engine", f"http://127.0.0.1:{port}", "--engine", f"localhost:{port + 1}"]  # fmt: skip
    proc = subprocess.Popen(argv, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True)
    lines: queue.Queue[str] = queue.Queue()
    threading.Thread(target=_reader, args=(proc.stdout, lines), daemon=True).start()
    seen: set[int] = set()
    try:
        seen = wait_for_descendant(proc, "--disable-hot-restart", STARTUP_S)
        s = Served(proc, "", lines, seen)
        ready = s.next_matching(r"ready at http://", STARTUP_S)
        assert "2 vLLM server(s)" in ready
        m = re.search(r"ready at (http://[\d.]+:\d+)", ready)
        assert m is not None
        s.next_matching(r"model='emu/outside'")  # the printed SDK command names the served model
        gpt = openai.OpenAI(base_url=m.group(1) + "/v1", api_key="unused", max_retries=0, timeout=60)
        gpt.chat.completions.create(
            model="emu/outside", max_tokens=4, messages=[{"role": "user", "content": "x"}]
        )
        line = s.next_matching(r"-> 127\.0\.0\.1:\d+")
        assert f"127.0.0.1:{port}" in line or f"127.0.0.1:{port + 1}" in line
        assert not any(" emulate " in cmdline(p) for p in descendants(proc.pid))  # no emulator of its own
        proc.send_signal(signal.SIGTERM)
        assert stopped_cleanly(proc, seen, 60.0) == {}
        assert emu.poll() is None  # the servers it was pointed at are not its to stop
    finally:
        for p in (proc, emu):
            if p.poll() is None:
                p.kill()
                p.wait()
        kill_all(seen)
