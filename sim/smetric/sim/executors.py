"""Where a sweep's runs execute: in this process, on a local process pool (the default), or on a
Dask cluster (``--cluster``, :mod:`smetric.sim.cluster`, imported only then).

Every executor runs :func:`smetric.sim.sweep.run_task` and yields ``(task, row, cost)`` as runs
finish; rows do not depend on the executor (the sweep orders them canonically).
"""

from __future__ import annotations

import os
from collections.abc import Iterator
from concurrent.futures import FIRST_COMPLETED, Future, ProcessPoolExecutor, wait
from typing import Any

from smetric.sim.sweep import Executor, RunCost, RunTask, run_task

Done = tuple[RunTask, dict[str, Any], RunCost]


class InlineExecutor:
    """One run after another in this process (``--workers 1``; tests)."""

    def run(self, tasks: list[RunTask]) -> Iterator[Done]:
        for t in tasks:
            row, cost = run_task(t)
            yield t, row, cost

    def close(self) -> None:
        return None


class PoolExecutor:
    """A local process pool, kept across the sweep's rounds; each worker process loads and
    prepares the trace once (``prepared`` cache)."""

    def __init__(self, workers: int) -> None:
        self._pool = ProcessPoolExecutor(max_workers=workers)

    def run(self, tasks: list[RunTask]) -> Iterator[Done]:
        pending: dict[Future[tuple[dict[str, Any], RunCost]], RunTask] = {
            self._pool.submit(run_task, t): t for t in tasks
        }
        try:
            while pending:
                finished, _ = wait(pending, return_when=FIRST_COMPLETED)
                for fut in finished:
                    t = pending.pop(fut)
                    row, cost = fut.result()
                    yield t, row, cost
        finally:
            for fut in pending:
                fut.cancel()

    def close(self) -> None:
        self._pool.shutdown(wait=True, cancel_futures=True)


def make_executor(workers: int | None, cluster: str | None, n_tasks: int, trace_paths: list[str]) -> Executor:
    """``cluster`` set: a Dask executor (address, or ``local:N``); else the local pool (or inline
    for one worker / one task)."""
    if cluster:
        from smetric.sim.cluster import DaskExecutor  # imports distributed itself, only here

        try:
            return DaskExecutor(cluster, trace_paths)
        except ImportError as exc:
            raise ValueError(
                f"--cluster needs Dask distributed: pip install 'smetric[cluster]' ({exc})"
            ) from None
    n = max(1, min(workers or os.cpu_count() or 1, n_tasks))
    return InlineExecutor() if n == 1 else PoolExecutor(n)
