"""Sweep executor benchmark (a benchmark, not a test): a 48-run sweep through ``smetric simulate``
inline (1 process), on the local process pool (2) and on a throwaway Dask cluster of 1 and 2
workers (``--cluster local:N``), with the per-task overhead of each executor.

    python -m smetric.bench.simspeed.cluster [--trace PATH] [--json out.json]

The sweep: 4 policies x 4 rates x 3 seeds on 16 instances, the whole agentic trace, 900 + 900
simulated seconds (about a second of CPU per run, the regime map's scale), no knee extension
(exactly 48 runs). For each executor:
wall time of the whole command (including a Dask cluster's start and stop), the sum of the runs'
own wall and CPU seconds (from the streamed sidecar), speed-up over inline, and the per-task
overhead ``(wall x workers - sum of run wall times) / runs`` -- what scheduling, transfer and
result handling add per run. Every executor's JSON must be byte-identical (checked).
"""

from __future__ import annotations

import argparse
import json
import os
import signal
import sys
import tempfile
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from smetric.core.outputs import check_writable
from smetric.sim.cli import default_trace, main
from smetric.sim.stream import sidecar_path

STOPPED = (128 + signal.SIGINT, 128 + signal.SIGTERM)  # smetric simulate's exit status when signalled

POLICIES = "smetric,lmetric,dynamo,load-balance"
RATES = "1,1.5,2,2.5"
SEEDS = "0,1,2"


def sweep_args(trace: Path, out: Path) -> list[str]:
    return ["--trace", str(trace), "--instances", "16", "--policies", POLICIES,
            "--rates", RATES, "--seeds", SEEDS, "--warmup-s", "900", "--measure-s", "900",
            "--no-extend-past-knee", "--json", str(out)]  # fmt: skip


def measure(name: str, extra: list[str], workers: int, trace: Path, folder: Path) -> dict[str, object]:
    out = folder / f"{name}.json"
    t0 = time.perf_counter()
    rc = main([*sweep_args(trace, out), *extra])
    wall = time.perf_counter() - t0
    if rc in STOPPED:  # SIGINT / SIGTERM: smetric simulate stopped its workers and said so
        raise SystemExit(rc)
    if rc != 0:
        raise SystemExit(f"{name}: smetric simulate exited {rc}")
    recs = [json.loads(x) for x in sidecar_path(out).read_text().splitlines()[1:]]
    run_wall = sum(float(r["wall_s"]) for r in recs)
    run_cpu = sum(float(r["cpu_s"]) for r in recs)
    return {
        "executor": name,
        "workers": workers,
        "runs": len(recs),
        "wall_s": wall,
        "sum_run_wall_s": run_wall,
        "sum_run_cpu_s": run_cpu,
        "overhead_per_task_s": (wall * workers - run_wall) / len(recs),
        "json": out.read_bytes(),
    }


def run(trace: Path) -> list[dict[str, object]]:
    with tempfile.TemporaryDirectory() as tmp:
        folder = Path(tmp)
        res = [
            measure("inline", ["--workers", "1"], 1, trace, folder),
            measure("pool", ["--workers", "2"], 2, trace, folder),
            measure("dask local:1", ["--cluster", "local:1"], 1, trace, folder),
            measure("dask local:2", ["--cluster", "local:2"], 2, trace, folder),
        ]
    ref = res[0]["json"]
    for r in res:
        r["identical_json"] = r.pop("json") == ref
        r["speedup_vs_inline"] = float(res[0]["wall_s"]) / float(r["wall_s"])  # type: ignore[arg-type]
    return res


def cli(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", type=Path, default=None)
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    trace = a.trace or default_trace()
    try:  # before the sweeps start
        if a.json is not None:
            check_writable("--json", a.json)
        if not trace.is_file():
            raise ValueError(f"trace {trace} not found")
    except ValueError as exc:
        print(f"python -m smetric.bench.simspeed.cluster: {exc}", file=sys.stderr)
        return 2
    res = run(trace)
    t = Table(title=f"48-run sweep (16 instances, 900+900 s); {os.cpu_count()} cores, "
                    f"load average {os.getloadavg()[0]:.1f}")  # fmt: skip
    for c in (
        "executor",
        "wall s",
        "speed-up",
        "sum run wall s",
        "sum run CPU s",
        "overhead/task s",
        "same JSON",
    ):
        t.add_column(c, justify="left" if c == "executor" else "right")
    for r in res:
        t.add_row(
            str(r["executor"]),
            f"{r['wall_s']:.1f}",
            f"{r['speedup_vs_inline']:.2f}x",
            f"{r['sum_run_wall_s']:.1f}",
            f"{r['sum_run_cpu_s']:.1f}",
            f"{r['overhead_per_task_s']:.3f}",
            "yes" if r["identical_json"] else "NO",
        )
    Console(width=140).print(t)
    if a.json is not None:
        a.json.write_text(json.dumps(res, indent=1))
    return 0 if all(r["identical_json"] for r in res) else 1


if __name__ == "__main__":
    sys.exit(cli())
