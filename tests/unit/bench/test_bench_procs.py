"""Process supervisor: children live in their own groups and are all reaped, also on failure."""

from __future__ import annotations

import asyncio
import os
import socket
import sys
from pathlib import Path

import pytest

from smetric.bench.procs import BenchError, Supervisor, free_port_range, port_is_free, require_free

# A parent that starts a grandchild in its own group and ignores SIGTERM (a stubborn server).
STUBBORN = """
import signal, subprocess, sys, time
signal.signal(signal.SIGTERM, signal.SIG_IGN)
child = subprocess.Popen([sys.executable, "-c", "import time; time.sleep(60)"])
print(child.pid, flush=True)
time.sleep(60)
"""


def _gone(pid: int) -> bool:
    try:
        os.kill(pid, 0)
    except ProcessLookupError:
        return True
    # a zombie still answers kill(0); check its state
    try:
        with open(f"/proc/{pid}/stat") as f:
            return f.read().split()[2] == "Z"
    except FileNotFoundError:
        return True


async def _grandchild_pid(log: Path) -> int:
    for _ in range(200):
        text = log.read_text() if log.exists() else ""
        if text.strip():
            return int(text.split()[0])
        await asyncio.sleep(0.05)
    raise AssertionError("grandchild never started")


async def test_stop_all_kills_the_whole_group_even_if_sigterm_is_ignored(tmp_path: Path) -> None:
    async with Supervisor(tmp_path, stop_timeout_s=0.5) as sup:
        child = await sup.start("stubborn", [sys.executable, "-c", STUBBORN])
        grandchild = await _grandchild_pid(child.log_path)
        assert os.getpgid(child.pid) == child.pid  # its own group
    assert not child.alive()
    for _ in range(50):
        if _gone(grandchild):
            break
        await asyncio.sleep(0.05)
    assert _gone(grandchild)


async def test_cleanup_on_exception(tmp_path: Path) -> None:
    with pytest.raises(RuntimeError, match="boom"):
        async with Supervisor(tmp_path, stop_timeout_s=0.5) as sup:
            child = await sup.start("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"])
            raise RuntimeError("boom")
    assert not child.alive()


async def test_cleanup_on_cancel(tmp_path: Path) -> None:
    started: asyncio.Future[int] = asyncio.get_running_loop().create_future()

    async def body() -> None:
        async with Supervisor(tmp_path, stop_timeout_s=0.5) as sup:
            child = await sup.start("sleeper", [sys.executable, "-c", "import time; time.sleep(60)"])
            started.set_result(child.pid)
            await asyncio.sleep(60)

    task = asyncio.create_task(body())
    pid = await started
    task.cancel()
    with pytest.raises(asyncio.CancelledError):
        await task
    assert _gone(pid)


async def test_dead_child_is_reported_with_its_log(tmp_path: Path) -> None:
    async with Supervisor(tmp_path) as sup:
        child = await sup.start(
            "crasher", [sys.executable, "-c", "print('bad flag --x'); raise SystemExit(3)"]
        )
        await child.proc.wait()
        with pytest.raises(BenchError, match=r"crasher exited with code 3(.|\n)*bad flag"):
            sup.check_alive()


async def test_missing_binary_is_a_clear_error(tmp_path: Path) -> None:
    async with Supervisor(tmp_path) as sup:
        with pytest.raises(BenchError, match="not found"):
            await sup.start("envoy", ["/nonexistent/envoy", "--version"])


def test_ports() -> None:
    base = free_port_range(4)
    assert all(port_is_free(p) for p in range(base, base + 4))
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        sock.listen()
        taken = sock.getsockname()[1]
        assert not port_is_free(taken)
        with pytest.raises(BenchError, match=f"port\\(s\\) {taken}"):
            require_free([taken], "picker")
        assert free_port_range(2, start=taken, stop=taken + 10) > taken


def test_a_torn_down_pool_s_manager_thread_dies_quietly() -> None:
    """CPython 3.11's executor manager thread raises InvalidStateError on a future shutdown() had
    cancelled (seen as a traceback after Ctrl-C under load); the teardown's hook drops exactly that,
    from exactly that thread. Without the hook the traceback reaches the default excepthook."""
    import threading
    from concurrent.futures import InvalidStateError

    from smetric.bench.procs import _quiet_broken_pool

    seen: list[type[BaseException]] = []
    manager, other = threading.Thread(), threading.Thread()
    quiet = _quiet_broken_pool(lambda a: seen.append(a.exc_type), manager)

    def args(exc: type[BaseException], thread: threading.Thread) -> threading.ExceptHookArgs:
        return threading.ExceptHookArgs((exc, exc(), None, thread))

    quiet(args(InvalidStateError, manager))
    assert seen == []
    quiet(args(InvalidStateError, other))
    quiet(args(RuntimeError, manager))
    assert seen == [InvalidStateError, RuntimeError]
