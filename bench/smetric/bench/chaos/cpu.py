"""CPU seconds a process has run, all its threads together (the first field of
``/proc/<pid>/task/<tid>/schedstat``). A latency measured on a loaded box can be the process's own
work or time it waited for a CPU; ``min(latency, CPU seconds it ran meanwhile)`` is what the
process itself can have made of it, whatever else the box runs. A thread sleeping on the GIL does
not run, but the thread holding it does: a stall of the event loop behind a parse on another
thread shows as that thread's CPU seconds."""

from __future__ import annotations

import os
import time
from pathlib import Path


def process_cpu_s(pid: int) -> float:
    """CPU seconds the live threads of ``pid`` have run (0 for a process that is gone; a thread
    that ended is no longer counted, so take differences over short spans)."""
    total = 0
    try:
        tids = os.listdir(f"/proc/{pid}/task")
    except OSError:
        return 0.0
    for tid in tids:
        try:
            total += int(Path(f"/proc/{pid}/task/{tid}/schedstat").read_text().split()[0])
        except (OSError, IndexError, ValueError):
            continue
    return total / 1e9


def cpu_s_of(call: object, *args: object) -> float:
    """CPU seconds this thread spends in ``call(*args)``."""
    assert callable(call)
    t0 = time.thread_time()
    call(*args)
    return time.thread_time() - t0


__all__ = ["cpu_s_of", "process_cpu_s"]
