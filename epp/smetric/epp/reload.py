"""Reload the picker's config file when it changes (``--config-file``; ``--config-text`` is fixed).

:class:`ConfigReloader` reads the file every ``interval_s`` (:data:`RELOAD_INTERVAL_S`) and compares
its bytes' hash with the last it saw: no inotify (a Kubernetes ConfigMap volume swaps a symlink,
which inotify on the file misses), no reliance on mtime granularity. A changed file is validated
exactly as at start-up (either format, :func:`smetric.epp.config.read_config`) and handed to
``apply``; a file that cannot be read, is not valid YAML, fails validation, or that ``apply``
refuses (its policy parameters) keeps the running config and logs one error naming the problem,
once per bad content (the next change is tried again). Bounds: one read of at most
:data:`MAX_CONFIG_BYTES` per interval (a larger file is a bad file).
"""

from __future__ import annotations

import asyncio
import hashlib
import logging
from collections.abc import Callable
from pathlib import Path

import yaml

from smetric.core.stopping import cancel_and_wait
from smetric.epp.config import ConfigError, LoadedConfig, read_config
from smetric.policy.pickerconfig import yaml_problem

log = logging.getLogger("smetric.epp.config")

RELOAD_INTERVAL_S = 2.0  # a ConfigMap change reaches the pod's volume within the kubelet's sync (~1 min)
MAX_CONFIG_BYTES = 1 << 20  # a picker config is a few hundred bytes; an upstream one a few kB

Apply = Callable[[LoadedConfig], None]


def _digest(data: bytes) -> str:
    return hashlib.sha256(data).hexdigest()


class ConfigReloader:
    def __init__(self, path: str | Path, apply: Apply, *, interval_s: float = RELOAD_INTERVAL_S) -> None:
        """``apply``: install a validated config (raise :class:`ConfigError` or ``ValueError`` to
        refuse it). The file's content at construction is the one running."""
        if interval_s <= 0:
            raise ValueError("interval_s must be positive")
        self.path = Path(path)
        self._apply = apply
        self.interval_s = interval_s
        self._seen = self._read_digest()  # the running config's file (as read at start-up)
        self._task: asyncio.Task[None] | None = None
        self.reloads = 0
        self.failures = 0

    def _read(self) -> bytes:
        with self.path.open("rb") as f:
            data = f.read(MAX_CONFIG_BYTES + 1)
        if len(data) > MAX_CONFIG_BYTES:
            raise ConfigError(f"{self.path}: larger than {MAX_CONFIG_BYTES} bytes")
        return data

    def _read_digest(self) -> str:
        try:
            return _digest(self._read())
        except (OSError, ConfigError):
            return ""

    def check(self) -> bool:
        """One poll: ``True`` when a changed file was applied."""
        try:
            data = self._read()
        except OSError as exc:
            return self._refuse(f"io:{exc.errno}", f"{self.path}: cannot read config: {exc.strerror}")
        except ConfigError as exc:
            return self._refuse("too-large", str(exc))
        digest = _digest(data)
        if digest == self._seen:
            return False
        try:
            doc = yaml.safe_load(data)
        except yaml.YAMLError as exc:
            return self._refuse(digest, f"{self.path}: not valid YAML: {yaml_problem(exc)}")
        try:
            loaded = read_config(doc, str(self.path))
            self._apply(loaded)
        except (ConfigError, ValueError) as exc:
            return self._refuse(digest, str(exc))
        self._seen = digest
        self.reloads += 1
        for warning in loaded.warnings:
            log.warning("config: %s", warning)
        log.info("config reloaded from %s (policy %s)", self.path, loaded.config.policy.name)
        return True

    def _refuse(self, key: str, message: str) -> bool:
        """Log once per bad content (or per read error): the running config stays."""
        if key != self._seen:
            self._seen = key
            self.failures += 1
            log.error("config reload refused, the running config stays: %s", message)
        return False

    async def _loop(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            try:
                self.check()
            except Exception:  # never let a surprise end the reload loop
                log.exception("config reload check failed")

    def start(self) -> None:
        self._task = asyncio.get_running_loop().create_task(self._loop(), name="config-reload")

    async def stop(self) -> None:
        await cancel_and_wait(self._task)
        self._task = None
