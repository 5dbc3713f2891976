"""The processes a command started, read from /proc: its descendants while it runs, and whether any
of them is still alive after it ended (children started in their own session are re-parented to
init when their parent dies, so they are recorded while the parent lives)."""

from __future__ import annotations

import contextlib
import os
import signal
import subprocess
import time
from pathlib import Path


def _stat(pid: int) -> tuple[str, int] | None:
    """(state, parent pid) of ``pid``, or ``None`` when it is gone."""
    try:
        text = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    fields = text.rsplit(")", 1)[1].split()  # the command name may hold spaces and parentheses
    return fields[0], int(fields[1])


def descendants(pid: int) -> set[int]:
    """Every live process below ``pid`` (children, grandchildren, ...)."""
    children: dict[int, list[int]] = {}
    for entry in Path("/proc").iterdir():
        if entry.name.isdigit():
            st = _stat(int(entry.name))
            if st is not None:
                children.setdefault(st[1], []).append(int(entry.name))
    out: set[int] = set()
    todo = [pid]
    while todo:
        for child in children.get(todo.pop(), []):
            if child not in out:
                out.add(child)
                todo.append(child)
    return out


def cmdline(pid: int) -> str:
    try:
        return Path(f"/proc/{pid}/cmdline").read_bytes().replace(b"\0", b" ").decode(errors="replace")
    except OSError:
        return ""


def alive(pids: set[int]) -> dict[int, str]:
    """The ones of ``pids`` still running (not gone, not a zombie), with their command lines."""
    out = {}
    for pid in pids:
        st = _stat(pid)
        if st is not None and st[0] != "Z":
            out[pid] = cmdline(pid)
    return out


def wait_for_descendant(proc: subprocess.Popen[str], fragment: str, timeout_s: float) -> set[int]:
    """Poll until a descendant's command line holds ``fragment``; every descendant seen on the way.
    Fails when ``proc`` ends first or the time runs out."""
    seen: set[int] = set()
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        assert proc.poll() is None, f"ended early with {proc.returncode}"
        now = descendants(proc.pid)
        seen |= now
        if any(fragment in cmdline(p) for p in now):
            return seen
        time.sleep(0.3)
    raise AssertionError(f"no process with {fragment!r} under {proc.pid} after {timeout_s:.0f} s")


def stopped_cleanly(proc: subprocess.Popen[str], seen: set[int], timeout_s: float) -> dict[int, str]:
    """Wait for ``proc`` to end (killing it after ``timeout_s``) and return the survivors among
    ``seen`` and its last descendants, after a grace for their own shutdown."""
    seen |= descendants(proc.pid)
    try:
        proc.wait(timeout_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()
    deadline = time.monotonic() + 2.0
    while alive(seen) and time.monotonic() < deadline:
        time.sleep(0.1)
    return alive(seen)


def kill_all(pids: set[int]) -> None:
    """Test cleanup: SIGKILL whatever of ``pids`` still runs (so a failing test leaks nothing)."""
    for pid in alive(pids):
        with contextlib.suppress(OSError):
            os.kill(pid, signal.SIGKILL)
