"""Child processes for the integration tests: spawn `python -m ...` unbuffered, stop with SIGTERM."""

from __future__ import annotations

import asyncio
import os
import signal
import sys


async def spawn(*args: str, log: str | None = None) -> asyncio.subprocess.Process:
    """``python ARGS`` with stdout piped; stderr to ``log`` (a file path) or discarded."""
    err = open(log, "wb") if log else asyncio.subprocess.DEVNULL  # noqa: SIM115 (child owns it)
    return await asyncio.create_subprocess_exec(
        sys.executable,
        *args,
        stdout=asyncio.subprocess.PIPE,
        stderr=err,
        env={**os.environ, "PYTHONUNBUFFERED": "1"},
    )


async def stop(proc: asyncio.subprocess.Process, grace_s: float = 15.0) -> None:
    """SIGTERM, then SIGKILL after ``grace_s``."""
    if proc.returncode is None:
        proc.send_signal(signal.SIGTERM)
        try:
            await asyncio.wait_for(proc.wait(), grace_s)
        except TimeoutError:
            proc.kill()
            await proc.wait()
