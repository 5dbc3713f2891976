"""``smetric chaos --json OUT [--quick]``: break a local Envoy + picker + emulated engines one fault
at a time, then run a multi-turn streaming load. It prints one table (fault, expected, observed, pass;
the faults are in :mod:`smetric.bench.chaos.faults`) and exits 1 if any row failed.

``--quick`` (CI): fewer sessions and a 15 s load instead of 60 s. JSON: ``{"rows": [{fault,
expected, observed, passed, guard}], "load": {sent, failed, stuck, p50_s, p99_s, picker_rss_mb_start,
picker_rss_mb_peak, picker_rss_mb_end}, "quick", "wall_s", "guards_off"}``.

``--guard-off NAME`` (repeatable): build the stack without that guard
(:mod:`smetric.bench.chaos.guards`) and run only the faults that check it, no load; the exit
status is 0 when every row naming a disabled guard FAILED (the rows can see their guard), else 1.
``--only FAULT`` (repeatable) runs only the named fault functions.

A new fault: a function ``(ChaosStack, quick) -> list[Row]`` in its own module, one entry in
:data:`FAULTS` below; a new guard: one entry in :data:`GUARDS` (see docs/chaos.md).
"""

from __future__ import annotations

import asyncio
import json
import sys
import tempfile
import time
from collections.abc import Sequence
from dataclasses import asdict
from pathlib import Path

from smetric.bench.chaos import api, failing, gateway, spike, state
from smetric.bench.chaos.faults import FAULTS as BASE_FAULTS
from smetric.bench.chaos.faults import Fault, Row
from smetric.bench.chaos.guards import GUARDS as BASE_GUARDS
from smetric.bench.chaos.guards import NO_GUARD, Guard, by_name
from smetric.bench.chaos.stack import ChaosSettings, ChaosStack, HostileEngine, chat
from smetric.bench.procs import BenchError, Supervisor, check_writable
from smetric.core.argparsing import OneLineErrors
from smetric.core.stopping import Interrupted, run_until_signalled

STUCK_AFTER_S = 30.0  # a load request without an answer by then is "stuck"

# The faults run, in order, and the guards they check; other modules add theirs here.
FAULTS: tuple[Fault, ...] = (
    *BASE_FAULTS,
    *api.FAULTS,
    *state.FAULTS,
    *failing.FAULTS,
    *spike.FAULTS,
)
GUARDS: tuple[Guard, ...] = (
    *api.with_these_rows(BASE_GUARDS),
    *api.GUARDS,
    *state.GUARDS,
    *gateway.GUARDS,
    *failing.GUARDS,
    *spike.GUARDS,
)


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
        NO_GUARD,
    )


async def run(
    quick: bool,
    work: Path,
    faults: Sequence[Fault] = FAULTS,
    guards_off: tuple[Guard, ...] = (),
    load: bool = True,
) -> tuple[list[Row], dict[str, float]]:
    """Start the stack (without ``guards_off``), run ``faults`` in order, then the load (if
    ``load``). A fault that raises is one failed row naming the guards it was expected to check."""
    settings = ChaosSettings(guards_off=guards_off)
    rows: list[Row] = []
    figures: dict[str, float] = {}
    async with Supervisor(work / "logs") as sup:
        st = ChaosStack(sup, work, settings, HostileEngine())
        try:
            await st.start()
            for fault in faults:
                t0 = time.monotonic()
                try:
                    new = await fault(st, quick)
                except BenchError:
                    raise
                except Exception as exc:  # a fault that breaks the runner is a failed row, not a crash
                    checked = [g.name for g in GUARDS if fault.__name__ in g.faults] or [NO_GUARD]
                    new = [
                        Row(fault.__name__, "runs", f"raised {type(exc).__name__}: {exc}", False, g)
                        for g in checked
                    ]
                rows += new
                print(f"  {fault.__name__}: {time.monotonic() - t0:.1f} s", file=sys.stderr)
            if load:
                sessions, duration_s = (16, 15.0) if quick else (100, 60.0)
                await st.wait_fresh()
                figures = await run_load(st, sessions, duration_s)
                rows.append(load_row(figures, sessions, duration_s))
        finally:
            await st.stop()
    return rows, figures


def faults_checking(guards: Sequence[Guard], only: Sequence[str] = ()) -> list[Fault]:
    """The faults (in run order) whose rows check any of ``guards``, or those named in ``only``."""
    wanted = {f for g in guards for f in g.faults} | set(only)
    known = {f.__name__ for f in FAULTS}
    missing = wanted - known
    if missing:
        raise ValueError(f"unknown fault(s) {sorted(missing)}; known: {sorted(known)}")
    return [f for f in FAULTS if f.__name__ in wanted]


def unguarded_failures(rows: Sequence[Row], guards: Sequence[Guard]) -> dict[str, list[str]]:
    """For each disabled guard, what is wrong: no row names it, or rows naming it still passed."""
    problems: dict[str, list[str]] = {}
    for g in guards:
        named = [r for r in rows if r.guard == g.name]
        if not named:
            problems[g.name] = ["no row names this guard"]
        elif passed := [r.fault for r in named if r.passed]:
            problems[g.name] = [f"still passes with the guard off: {f}" for f in passed]
    return problems


def table(rows: Sequence[Row]) -> str:
    out = ["| fault | guard | expected | observed | pass |", "|---|---|---|---|---|"]
    out += [
        f"| {r.fault} | {r.guard or '-'} | {r.expected} | {r.observed} | {'yes' if r.passed else '**NO**'} |"
        for r in rows
    ]
    return "\n".join(out)


def main(argv: Sequence[str] | None = None) -> int:
    p = OneLineErrors(prog="smetric chaos", description=__doc__.split("\n\n")[0])
    p.add_argument(
        "--json", default="", help="write rows and load figures here (required unless --list-guards)"
    )
    p.add_argument("--quick", action="store_true", help="CI size: fewer sessions, 15 s load")
    p.add_argument("--work-dir", default="", help="logs and state (default: a temporary directory)")
    p.add_argument(
        "--guard-off",
        action="append",
        default=[],
        metavar="GUARD",
        help="build the stack without this guard and run only the faults checking it; pass = its rows fail",
    )
    p.add_argument("--only", action="append", default=[], metavar="FAULT", help="run only this fault")
    p.add_argument("--list-guards", action="store_true", help="print the guards and their faults, then exit")
    a = p.parse_args(list(sys.argv[1:] if argv is None else argv))
    table_of = by_name(GUARDS)
    if a.list_guards:
        for g in GUARDS:
            print(f"{g.name}: {g.what} [faults: {', '.join(g.faults)}]")
        return 0
    if not a.json:
        p.error("the following arguments are required: --json")
    unknown = [n for n in a.guard_off if n not in table_of]
    if unknown:
        print(f"smetric chaos: unknown guard(s) {unknown}; --list-guards shows them", file=sys.stderr)
        return 2
    off = tuple(table_of[n] for n in a.guard_off)
    try:
        faults = faults_checking(off, a.only) if off or a.only else list(FAULTS)
    except ValueError as exc:
        print(f"smetric chaos: {exc}", file=sys.stderr)
        return 2
    out = Path(a.json)
    try:  # before the stack starts: a run's results must have somewhere to go
        check_writable("--json", out)
        if a.work_dir:
            try:
                Path(a.work_dir).mkdir(parents=True, exist_ok=True)
            except OSError as exc:
                raise BenchError(
                    f"--work-dir {a.work_dir}: cannot make the folder ({exc.strerror or exc})"
                ) from None
            check_writable("--work-dir", Path(a.work_dir) / ".smetric-chaos-check")
    except BenchError as exc:
        print(f"smetric chaos: {exc}", file=sys.stderr)
        return 2
    t0 = time.monotonic()
    with tempfile.TemporaryDirectory(prefix="smetric-chaos-") as tmp:
        work = Path(a.work_dir or tmp)
        try:
            rows, load = run_until_signalled(run(a.quick, work, faults, off, load=not (off or a.only)))
        except BenchError as exc:
            print(f"smetric chaos: {exc}", file=sys.stderr)
            return 2
        except Interrupted as exc:
            print(f"smetric chaos: {exc}; every started process was stopped", file=sys.stderr)
            return exc.exit_code
    doc = {
        "rows": [asdict(r) for r in rows],
        "load": load,
        "quick": a.quick,
        "wall_s": round(time.monotonic() - t0, 1),
        "guards_off": [g.name for g in off],
    }
    print(table(rows))  # printed before the file is written: a failed write loses nothing
    try:
        out.write_text(json.dumps(doc, indent=2))
    except OSError as exc:
        print(f"smetric chaos: --json {out}: cannot write there ({exc.strerror or exc})", file=sys.stderr)
        return 2
    if off:
        problems = unguarded_failures(rows, off)
        for name, lines in problems.items():
            print(f"guard {name!r}: " + "; ".join(lines))
        print("every row of the disabled guard(s) failed" if not problems else "")
        return 1 if problems else 0
    failed = [r.fault for r in rows if not r.passed]
    print(
        f"\n{len(rows) - len(failed)}/{len(rows)} rows passed in {doc['wall_s']} s"
        + (f"; failed: {failed}" if failed else "")
    )
    return 1 if failed else 0


if __name__ == "__main__":
    raise SystemExit(main())
