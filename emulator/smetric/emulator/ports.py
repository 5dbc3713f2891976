"""Free-port search for tests and tools that start emulators on consecutive ports."""

from __future__ import annotations

import socket

from smetric.core.ports import HANDED_OUT, free_port


def free_port_block(n: int, host: str = "127.0.0.1", attempts: int = 50) -> int:
    """A port ``p`` such that ``p .. p+n-1`` could all be bound a moment ago (racy by nature:
    callers that lose the race get an ``OSError`` from their own bind)."""
    if n < 1:
        raise ValueError("n must be >= 1")
    for _ in range(attempts):
        base = free_port(host)  # below the ephemeral range (smetric.core.ports), recorded as handed out
        if base + n > 65536 or not HANDED_OUT.claim(range(base + 1, base + n)):
            continue
        socks: list[socket.socket] = []
        try:
            for i in range(n):
                s = socket.socket()
                socks.append(s)
                s.bind((host, base + i))
            return base
        except OSError:
            continue
        finally:
            for s in socks:
                s.close()
    raise RuntimeError(f"no block of {n} free ports on {host}")
