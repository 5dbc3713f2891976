"""Simulator speed benchmark (a benchmark, not a test): events/s and how cost grows.

    .venv/bin/python -m smetric.bench.simspeed.simulator [--trace PATH] [--policy smetric] [--json out.json]

Reports, on one core:

1. the headline case: the agentic trace, 32 instances, one policy, one rate (6x base, near
   saturation) -- the target is <= 60 s wall;
2. cost vs cluster size: 8, 32, 128 instances at the same per-instance load (6x base, the base
   rate scales with the instance count);
3. cost vs requests: 32 instances at 6x with a measurement window of 0.5, 1 and 2 hours (the
   number of simulated requests grows with the simulated time).
"""

from __future__ import annotations

import argparse
import json
import sys
import time
from pathlib import Path

from rich.console import Console
from rich.table import Table

from smetric.core.outputs import check_writable
from smetric.sim.cli import default_trace
from smetric.sim.simulator import SimConfig, simulate
from smetric.sim.sweep import BASE_FAMILIES_PER_S_PER_32, WorkloadSpec, prepared

MULTIPLIER = 6.0


def case(policy: str, trace: Path, instances: int, warmup_s: float, measure_s: float) -> dict[str, float]:
    work = prepared(WorkloadSpec(str(trace)))
    rate = BASE_FAMILIES_PER_S_PER_32 * instances / 32 * MULTIPLIER
    cfg = SimConfig(instances=instances, warmup_s=warmup_s, measure_s=measure_s)
    r = simulate(work, policy, rate, cfg)
    sent = int(r.metrics["requests_sent"])
    return {
        "instances": instances,
        "simulated_s": warmup_s + measure_s,
        "families_per_s": rate,
        "requests_sent": sent,
        "events": r.events,
        "wall_s": r.sim_wall_s,
        "events_per_s": r.events / r.sim_wall_s,
        "requests_per_wall_s": sent / r.sim_wall_s,
        "us_per_request_per_instance": 1e6 * r.sim_wall_s / max(1, sent) / instances,
    }


def main(argv: list[str] | None = None) -> int:
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--trace", type=Path, default=default_trace())
    p.add_argument("--policy", default="smetric")
    p.add_argument("--json", type=Path, default=None)
    a = p.parse_args(argv)
    if not a.trace.exists():
        print(f"trace not found: {a.trace}", file=sys.stderr)
        return 2
    t0 = time.perf_counter()
    try:  # the output path and the trace before any run
        if a.json is not None:
            check_writable("--json", a.json)
        prepared(WorkloadSpec(str(a.trace)))
    except ValueError as exc:  # TraceFormatError is one
        print(f"python -m smetric.bench.simspeed.simulator: {exc}", file=sys.stderr)
        return 2
    load_s = time.perf_counter() - t0
    rows = {
        "headline": [case(a.policy, a.trace, 32, 3600.0, 3600.0)],
        "instances": [case(a.policy, a.trace, n, 3600.0, 3600.0) for n in (8, 32, 128)],
        "requests": [case(a.policy, a.trace, 32, 3600.0, m) for m in (1800.0, 3600.0, 7200.0)],
    }
    t = Table(title=f"simulator speed ({a.policy}, {MULTIPLIER:g}x base, trace load+prepare {load_s:.1f} s)")
    for col in (
        "case",
        "instances",
        "sim h",
        "fam/s",
        "requests",
        "events",
        "wall s",
        "events/s",
        "req/s",
        "us/req/inst",
    ):
        t.add_column(col, justify="right")
    for name, group in rows.items():
        for r in group:
            t.add_row(
                name,
                f"{r['instances']:.0f}",
                f"{r['simulated_s'] / 3600:.1f}",
                f"{r['families_per_s']:.3f}",
                f"{r['requests_sent']:.0f}",
                f"{r['events']:.0f}",
                f"{r['wall_s']:.1f}",
                f"{r['events_per_s']:.0f}",
                f"{r['requests_per_wall_s']:.0f}",
                f"{r['us_per_request_per_instance']:.1f}",
            )
        t.add_section()
    Console(width=150).print(t)
    if a.json is not None:
        a.json.write_text(json.dumps({"load_s": load_s, **rows}, indent=1))
    return 0


if __name__ == "__main__":
    sys.exit(main())
