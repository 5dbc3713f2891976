"""CPU per row: the router's, the client's and the engines' CPU time per request, and the share of
the box, read from /proc by process group (a fake /proc here; the live one in the last test)."""

from __future__ import annotations

import math
import os
from pathlib import Path

from smetric.bench import cpu
from smetric.bench.cpu import CpuSnapshot, CpuUse, group_cpu_s

TICK = cpu._TICK_S


def _proc(root: Path, pid: int, name: str, pgrp: int, utime: int, stime: int) -> None:
    # pid (comm) state ppid pgrp session tty tpgid flags minflt cminflt majflt cmajflt utime stime ...
    d = root / str(pid)
    d.mkdir(parents=True)
    d.joinpath("stat").write_text(
        f"{pid} ({name}) S 1 {pgrp} {pgrp} 0 -1 0 0 0 0 0 {utime} {stime} 0 0 20 0\n"
    )


def test_cpu_is_summed_over_each_process_group(tmp_path: Path) -> None:
    _proc(tmp_path, 100, "envoy", 100, 50, 10)
    _proc(tmp_path, 200, "python) smetric-epp (x", 200, 30, 5)  # a name with spaces and parentheses
    _proc(tmp_path, 201, "python", 200, 20, 5)  # the picker's worker, same group
    _proc(tmp_path, 300, "other", 300, 999, 999)
    (tmp_path / "self").mkdir()
    (tmp_path / "400").mkdir()  # a process that ended while we looked: no stat file
    got = group_cpu_s([100, 200, 500], tmp_path)
    assert math.isclose(got[100], 60 * TICK) and math.isclose(got[200], 60 * TICK) and got[500] == 0.0


def test_an_unreadable_proc_gives_nan_not_a_failure(tmp_path: Path) -> None:
    got = group_cpu_s([1, 2], tmp_path / "missing")
    assert all(math.isnan(v) for v in got.values())
    snap = CpuSnapshot.take({"emulator": 1, "envoy": 2}, tmp_path / "missing")
    use = CpuUse.between(snap, snap, requests=10, wall_s=5.0, cores=2)
    assert math.isnan(use.router_ms_per_request) and math.isnan(use.engines_ms_per_request)
    assert use.client_ms_per_request == 0.0 and use.box_share == 0.0


def test_per_request_figures_and_the_share_of_the_box() -> None:
    a = CpuSnapshot(10.0, {cpu.ROUTER: 1.0, cpu.ENGINES: 2.0})
    b = CpuSnapshot(11.0, {cpu.ROUTER: 3.0, cpu.ENGINES: 6.0})
    use = CpuUse.between(a, b, requests=100, wall_s=7.0, cores=2)
    assert math.isclose(use.router_ms_per_request, 20.0) and math.isclose(use.client_ms_per_request, 10.0)
    assert math.isclose(use.engines_ms_per_request, 40.0) and math.isclose(use.box_share, 0.5)
    assert CpuUse.between(a, b, requests=0, wall_s=0.0).box_share != CpuUse.between(a, b, 1, 1.0).box_share


def test_roles_split_the_emulator_from_the_router_on_the_live_proc() -> None:
    me = os.getpgrp()
    snap = CpuSnapshot.take({"emulator": me, "envoy": me, "picker": me})
    assert snap.roles_s[cpu.ROUTER] >= snap.roles_s[cpu.ENGINES] > 0.0  # two groups' worth vs one


def test_the_pickers_scrape_interval_in_model_time() -> None:
    timers = cpu.picker_timers(0.005)
    assert timers["picker_refresh_wall_ms"] == 50.0 and timers["picker_refresh_model_s"] == 10.0
