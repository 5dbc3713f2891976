"""``smetric chaos --json OUT [--quick]``: start Envoy + the picker + emulated engines locally, run
every fault of issue 12 against them (:mod:`smetric.bench.chaos_faults`), then a multi-turn
streaming load, print one table (fault, expected, observed, pass) and exit 1 if any row failed.

``--quick`` (CI): fewer sessions and a 15 s load instead of 60 s. JSON: ``{"rows": [{fault,
expected, observed, passed}], "load": {sent, failed, stuck, p50_s, p99_s, picker_rss_mb_start,
picker_rss_mb_peak, picker_rss_mb_end}, "quick", "wall_s"}``.
"""

from __future__ import annotations

import argparse
import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from smetric.bench.chaos_faults import FAULTS, Row
from smetric.bench.chaos_stack import ChaosSettings, ChaosStack, HostileEngine, chat
from smetric.bench.procs import BenchError, Supervisor

STUCK_AFTER_S = 30.0  # a load request without an answer by then is "stuck"


async def run_load(st: ChaosStack, sessions: int, duration_s: float) -> dict[str, float]:
    """``sessions`` agents, each sending its next streaming turn as soon as the last one ended."""
    latencies: list[float] = []
    counts = {"sent": 0, "failed": 0, "stuck": 0}
    rss = [st.rss_mb()]
    deadline = time.monotonic() + duration_s

    async def agent(i: int) -> None:
        turn = 0
        while time.monotonic() < deadline:
            counts["sent"] += 1
            r = await st.post(chat(f"load-{i}", turn % 12, max_tokens=24), timeout_s=STUCK_AFTER_S)
            if r.error.startswith("stuck"):
                counts["stuck"] += 1
            elif r.status != 200 or r.error:
                counts["failed"] += 1
            else:
                latencies.append(r.elapsed_s)
            turn += 1

    async def sample() -> None:
        while True:
            await asyncio.sleep(0.5)
            rss.append(st.rss_mb())

    sampler = asyncio.create_task(sample())
    await asyncio.gather(*(agent(i) for i in range(sessions)))
    sampler.cancel()
    await asyncio.sleep(1.0)
    latencies.sort()

    def pct(q: float) -> float:
        return latencies[min(len(latencies) - 1, int(q * len(latencies)))] if latencies else 0.0

    return {
        **{k: float(v) for k, v in counts.items()},
        "p50_s": round(pct(0.5), 3),
        "p99_s": round(pct(0.99), 3),
        "picker_rss_mb_start": round(rss[0], 1),
        "picker_rss_mb_peak": round(max(rss), 1),
        "picker_rss_mb_end": round(st.rss_mb(), 1),
    }


def load_row(load: dict[str, float], sessions: int, duration_s: float) -> Row:
    ok = load["failed"] == 0 and load["stuck"] == 0 and load["sent"] > 0
    growth = load["picker_rss_mb_end"] - load["picker_rss_mb_start"]
    return Row(
        f"{duration_s:g} s multi-turn streaming load ({sessions} sessions)",
        "0 failed, 0 stuck",
        f"{load['sent']:.0f} sent, {load['failed']:.0f} failed, {load['stuck']:.0f} stuck; "
        f"p50 {load['p50_s']:.2f} s, p99 {load['p99_s']:.2f} s; picker RSS "
        f"{load['picker_rss_mb_start']:.0f}/{load['picker_rss_mb_peak']:.0f}/{load['picker_rss_mb_end']:.0f} MB "
        f"(start/peak/end, {growth:+.0f})",
        ok,
    )


async def run(quick: bool, work: Path) -> tuple[list[Row], dict[str, float]]:
    settings = ChaosSettings()
    rows: list[Row] = []
    async with Supervisor(work / "logs") as sup:
        st = ChaosStack(sup, work, settings, HostileEngine())
        try:
            await st.start()
            for fault in FAULTS:
                t0 = time.monotonic()
                try:
                    new = await fault(st, quick)
                except BenchError:
                    raise
                except Exception as exc:  # a fault that breaks the runner is a failed row, not a crash
                    new = [Row(fault.__name__, "runs", f"raised {type(exc).__name__}: {exc}", False)]
                rows += new
                print(f"  {fault.__name__}: {time.monotonic() - t0:.1f} s", file=sys.stderr)
            sessions, duration_s = (16, 15.0) if quick else (100, 60.0)
            await st.wait_fresh()
            load = await run_load(st, sessions, duration_s)
            rows.append(load_row(load, sessions, duration_s))
        finally:
            await st.stop()
    return rows, load


def table(rows: Sequence[Row]) -> str:
    out = ["| fault | expected | observed | pass |", "|---|---|---|---|"]
    out += [f"| {r.fault} | {r.expected} | {r.observed} | {'yes' if r.passed else '**NO**'} |" for r in rows]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    p = argparse.ArgumentParser(prog="smetric chaos", description=__doc__.split("\n\n")[0])
    p.add_argument("--json", required=True, help="write rows and load figures here")
    p.add_argument("--quick", action="store_true", help="CI size: fewer sessions, 15 s load")
    p.add_argument("--work-dir", default="", help="logs and state (default: a temporary directory)")
    a = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="smetric-chaos-") as tmp:
        work = Path(a.work_dir or tmp)
        work.mkdir(parents=True, exist_ok=True)
        try:
            rows, load = asyncio.run(run(a.quick, work))
        except BenchError as exc:
            print(f"smetric chaos: {exc}", file=sys.stderr)
            return 2
    doc = {
        "rows": [asdict(r) for r in rows],
        "load": load,
        "quick": a.quick,
        "wall_s": round(time.monotonic() - t0, 1),
    }
    Path(a.json).write_text(json.dumps(doc, indent=2))
    print(table(rows))
    failed = [r.fault for r in rows if not r.passed]
    print(
        f"\n{len(rows) - len(failed)}/{len(rows)} rows passed in {doc['wall_s']} s"
        + (f"; failed: {failed}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
