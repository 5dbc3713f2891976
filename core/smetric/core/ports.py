"""A free TCP port for a listener a tool or test starts (an emulator, a picker, Envoy).

``bind(("127.0.0.1", 0))`` hands out a port from the kernel's ephemeral range, the range every
outgoing connection takes its local port from: between the probe and the child's own bind, a
busy box (a test suite beside, a bench's clients) can take it for a connection, and the child
exits with "address already in use". :func:`free_port` draws instead at random below that range
(Linux's ``ip_local_port_range``, 32768-60999 by default), where no outgoing connection lands; two
processes drawing the same port at the same moment remain possible (about one in 12,000 per
draw). Falls back to ``bind(0)`` where the range leaves no room below it.
"""

from __future__ import annotations

import secrets
import socket
from pathlib import Path

LOWEST = 20_000  # the draw's floor: above the registered ports servers commonly use
MIN_SPAN = 1_000  # fewer ports than this below the ephemeral range: let the kernel pick
ATTEMPTS = 64
RANGE_FILE = Path("/proc/sys/net/ipv4/ip_local_port_range")


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


def free_port(host: str = "127.0.0.1", *, range_file: Path = RANGE_FILE) -> int:
    """A port that is free now and outside the ephemeral range (see the module docstring)."""
    high = ephemeral_low(range_file)
    if high - LOWEST >= MIN_SPAN:
        for _ in range(ATTEMPTS):
            port = LOWEST + secrets.randbelow(high - LOWEST)
            if bindable(port, host):
                return port
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.bind((host, 0))
        return int(sock.getsockname()[1])
