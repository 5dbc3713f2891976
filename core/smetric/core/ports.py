"""A free TCP port for a listener a tool or test starts (an emulator, a picker, Envoy).

``bind(("127.0.0.1", 0))`` hands out a port from the kernel's ephemeral range, the range every
outgoing connection takes its local port from: between the probe and the child's own bind, a
busy box (a test suite beside, a bench's clients) can take it for a connection, and the child
exits with "address already in use". :func:`free_port` draws instead at random below that range
(Linux's ``ip_local_port_range``, 32768-60999 by default), where no outgoing connection lands; two
processes drawing the same port at the same moment remain possible (about one in 12,000 per
draw). Falls back to ``bind(0)`` where the range leaves no room below it.

A probe closes its socket, so the port stays free until the child binds it: a caller that draws
several ports before starting the children that bind them (a picker's four listeners, an engine
and its KV-event port) would get the same port twice about once in 12,000 pairs, which across a
test suite's thousands of draws fails a run or two (CI stop 40: "address already in use" twice).
So the process remembers the last :data:`REMEMBERED` ports it handed out and never hands one out
again while it is remembered: the module's one piece of state, a bounded record behind a lock.
"""

from __future__ import annotations

import secrets
import socket
import threading
from collections import deque
from pathlib import Path

LOWEST = 20_000  # the draw's floor: above the registered ports servers commonly use
MIN_SPAN = 1_000  # fewer ports than this below the ephemeral range: let the kernel pick
ATTEMPTS = 64
RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")
REMEMBERED = 4_096  # ports handed out that this process will not hand out again (a third of the draw's span)


class HandedOut:
    """The last ``limit`` ports this process handed out (oldest forgotten first), thread-safe."""

    def __init__(self, limit: int = REMEMBERED) -> None:
        self._order: deque[int] = deque()
        self._set: set[int] = set()
        self._limit = limit
        self._lock = threading.Lock()

    def claim(self, ports: range | list[int]) -> bool:
        """Record ``ports`` as handed out; False (recording nothing) if any already is."""
        with self._lock:
            if any(p in self._set for p in ports):
                return False
            for p in ports:
                self._order.append(p)
                self._set.add(p)
            while len(self._order) > self._limit:
                self._set.discard(self._order.popleft())
            return True

    def __contains__(self, port: object) -> bool:
        with self._lock:
            return port in self._set


HANDED_OUT = HandedOut()  # per process, see the module docstring


def ephemeral_low(path: Path = RANGE_FILE) -> int:
    """The lowest port of the kernel's ephemeral range (32768, Linux's default, where unreadable)."""
    try:
        return int(path.read_text().split()[0])
    except (OSError, ValueError, IndexError):
        return 32_768


def bindable(port: int, host: str = "127.0.0.1") -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        try:
            sock.bind((host, port))
        except OSError:
            return False
    return True


def free_port(
    host: str = "127.0.0.1", *, range_file: Path = RANGE_FILE, handed_out: HandedOut | None = HANDED_OUT
) -> int:
    """A port that is free now, outside the ephemeral range and not handed out by this process
    lately (see the module docstring). ``handed_out=None`` draws without that record."""
    high = ephemeral_low(range_file)
    if high - LOWEST >= MIN_SPAN:
        for _ in range(ATTEMPTS):
            port = LOWEST + secrets.randbelow(high - LOWEST)
            fresh = handed_out is None or port not in handed_out
            if fresh and bindable(port, host) and (handed_out is None or handed_out.claim([port])):
                return port
    for _ in range(ATTEMPTS):
        with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
            sock.bind((host, 0))
            port = int(sock.getsockname()[1])
        if handed_out is None or handed_out.claim([port]):
            return port
    raise OSError(f"no free port on {host} in {ATTEMPTS} tries")
