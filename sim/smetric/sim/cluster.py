"""``--cluster``: run a sweep's runs as tasks on a Dask distributed cluster.

Imported only when ``--cluster`` is given (the ``[cluster]`` extra: ``pip install
'smetric[cluster]'``). Why Dask and not Ray, how the trace reaches the workers and what happens
when a worker dies: ``docs/simulator.md`` ("Sweeps on a cluster").

* ``ADDRESS``: an existing scheduler (``tcp://host:8786``); ``local:N`` starts a throwaway
  :class:`distributed.LocalCluster` of ``N`` single-threaded worker processes and stops it at the
  end.
* The trace file's bytes are scattered once with ``broadcast=True`` (one copy per worker, not per
  task); a worker writes them to a content-addressed file in its temp dir once and prepares the
  workload once per process (``prepared`` cache), so workers need no shared file system.
* Failures: the scheduler re-runs the tasks of a worker that is lost (``distributed.scheduler.
  allowed-failures``, default 3 losses per task); a task that raises is retried ``RETRIES`` times,
  then the sweep stops with its error (rows already streamed are kept for ``--resume``).
"""

from __future__ import annotations

import hashlib
import os
import tempfile
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path
from typing import Any

from smetric.sim.sweep import RunCost, RunTask, run_task

RETRIES = 2
CONNECT_TIMEOUT_S = 60.0

TraceBlob = tuple[str, str, bytes]  # (file name, sha256 hex, content)


def _materialise(blob: TraceBlob) -> str:
    """The trace as a local file on this worker (written once, atomically)."""
    name, digest, data = blob
    folder = Path(tempfile.gettempdir()) / f"smetric-trace-{digest[:16]}"
    path = folder / name
    if not path.exists():
        folder.mkdir(parents=True, exist_ok=True)
        tmp = folder / f".{name}.{os.getpid()}.part"
        tmp.write_bytes(data)
        os.replace(tmp, path)
    return str(path)


def run_remote(task: RunTask, blob: TraceBlob) -> tuple[dict[str, Any], RunCost]:
    """A run on a worker: the trace comes from the scattered blob, not the client's path."""
    local = replace(task, workload=replace(task.workload, trace_path=_materialise(blob)))
    return run_task(local)


class DaskExecutor:
    """Runs sweep tasks on a Dask cluster (see the module docstring)."""

    def __init__(self, address: str, trace_paths: list[str]) -> None:
        from distributed import Client, LocalCluster

        self._cluster: Any = None
        if address.startswith("local:"):
            try:
                n = int(address.split(":", 1)[1])
            except ValueError:
                raise ValueError(f"--cluster local:N needs a worker count, got {address!r}") from None
            if n < 1:
                raise ValueError("--cluster local:N needs N >= 1")
            self._cluster = LocalCluster(
                n_workers=n, threads_per_worker=1, processes=True, dashboard_address=None
            )
            self.client: Any = Client(self._cluster)
        else:
            self.client = Client(address, timeout=CONNECT_TIMEOUT_S)
        self._blobs: dict[str, Any] = {}
        try:
            for p in dict.fromkeys(trace_paths):
                data = Path(p).read_bytes()
                blob: TraceBlob = (Path(p).name, hashlib.sha256(data).hexdigest(), data)
                self._blobs[p] = self.client.scatter(blob, broadcast=True, hash=False)
        except BaseException:
            self.close()
            raise

    @property
    def n_workers(self) -> int:
        return len(self.client.scheduler_info().get("workers", {}))

    def run(self, tasks: list[RunTask]) -> Iterator[tuple[RunTask, dict[str, Any], RunCost]]:
        from distributed import as_completed

        if not tasks:
            return
        futures = {
            self.client.submit(
                run_remote, t, self._blobs[t.workload.trace_path], pure=False, retries=RETRIES
            ): t
            for t in tasks
        }
        try:
            for fut in as_completed(futures):
                row, cost = fut.result()
                yield futures[fut], row, cost
        finally:
            self.client.cancel([f for f in futures if not f.done()])

    def close(self) -> None:
        try:
            self.client.close()
        finally:
            if self._cluster is not None:
                self._cluster.close()
