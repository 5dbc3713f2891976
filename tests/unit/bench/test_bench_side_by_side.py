"""``--quick`` runs a cell's rows side by side (``--concurrent-rows``), in wall units at time x0.02:
the rows start one at a time, run at once, share the client's CPU, and a crash stops the others."""

from __future__ import annotations

import asyncio
import time
from pathlib import Path
from types import SimpleNamespace
from typing import Any

import pytest

from smetric.bench import cli, cpu, differential_run, runner
from smetric.bench.cpu import CpuSnapshot, CpuUse
from smetric.bench.eta import RunCount
from smetric.bench.presets import QUICK_X0002
from smetric.bench.report import PolicyResult
from smetric.bench.stacks import ClusterSpec
from smetric.core.slo import SloConfig


def _resolve(*argv: str) -> Any:
    return cli.resolve(cli.build_parser().parse_args([*argv, "--json", "x"]))


def test_quick_is_side_by_side_in_wall_units_and_each_can_be_turned_off() -> None:
    quick = _resolve("--quick")
    assert quick.concurrent_rows and quick.picker_units == "wall"
    assert quick.time_scale == pytest.approx(0.02) and (quick.warmup_s, quick.duration_s) == (1500.0, 1000.0)
    assert not _resolve("--quick", "--no-concurrent-rows").concurrent_rows
    assert _resolve("--quick", "--picker-units", "model").picker_units == "model"
    full = _resolve()
    assert not full.concurrent_rows and full.picker_units == "model"
    assert _resolve("--concurrent-rows").concurrent_rows


class _Starts:
    """A fake emulator start that records how many starts overlap."""

    def __init__(self) -> None:
        self.active = self.most = 0

    async def start_cluster(self, sup: object, spec: object) -> str:
        self.active += 1
        self.most = max(self.most, self.active)
        await asyncio.sleep(0.02)  # the emulator binding its ports
        self.active -= 1
        return "cluster"


class _Frontend:
    router = "envoy"

    async def start(self, sup: object, cluster: object, spec: object, work_dir: Path) -> str:
        await asyncio.sleep(0)
        return f"urls of {cluster}"


@pytest.mark.parametrize("locked", [True, False])
def test_rows_side_by_side_start_one_at_a_time(
    monkeypatch: pytest.MonkeyPatch, tmp_path: Path, locked: bool
) -> None:
    """Free port ranges are checked, not reserved: two rows starting at once could take the same
    one. With the lock the starts never overlap; without it (the guard off) they do."""
    starts = _Starts()
    monkeypatch.setattr(runner, "start_cluster", starts.start_cluster)

    async def three() -> list[tuple[Any, Any]]:
        lock = asyncio.Lock() if locked else None
        spec = ClusterSpec(1, "qwen3-30b-h20", 0.02, 1000, 16, "0", "m")
        return await asyncio.gather(
            *(runner.start_stack(None, _Frontend(), spec, tmp_path, lambda _: None, lock) for _ in range(3))  # type: ignore[arg-type]
        )

    assert asyncio.run(three()) == [("cluster", "urls of cluster")] * 3
    assert starts.most == (1 if locked else 3)


def _bench(tmp_path: Path, monkeypatch: pytest.MonkeyPatch, *argv: str) -> cli.Bench:
    args = cli.build_parser().parse_args(["--quick", *argv, "--json", str(tmp_path / "x.json")])
    preset = cli.resolve(args)
    bench = cli.Bench(args, preset, cli.Console(width=200, quiet=True), tmp_path / "t", None)  # type: ignore[arg-type]
    bench.rows = [SimpleNamespace(label=f"row{i}") for i in range(3)]
    bench.labels = [fe.label for fe in bench.rows]
    spec = ClusterSpec(1, "qwen3-30b-h20", 0.02, 1000, 16, "0", "m")
    bench.settings = runner.RunSettings(spec, SloConfig(), 1.0, 1.0, 0, False, 30.0)
    bench.log_dir, bench.records_out, bench.count = tmp_path, None, None  # type: ignore[assignment]
    bench.run_count, bench.started = RunCount(3), time.monotonic()
    bench.meta = {"seeds": [0]}
    bench.progress = SimpleNamespace()  # type: ignore[assignment]
    monkeypatch.setattr(
        cli, "make_plan", lambda *a: (SimpleNamespace(families=[], n_sessions=0, n_requests=0), [""])
    )
    monkeypatch.setattr(bench, "write", lambda rows, final: None)
    return bench


@pytest.mark.parametrize("concurrent", [True, False])
def test_a_cell_runs_its_rows_at_once_unless_turned_off(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch, concurrent: bool
) -> None:
    bench = _bench(tmp_path, monkeypatch, *([] if concurrent else ["--no-concurrent-rows"]))
    seen: dict[str, Any] = {"active": 0, "most": 0, "locks": set(), "k": set()}

    async def row(fe: Any, plan: object, settings: object, rate: float, seed: int,
                  start_lock: asyncio.Lock | None = None, side_by_side: int = 1) -> PolicyResult:  # fmt: skip
        seen["active"] += 1
        seen["most"] = max(seen["most"], seen["active"])
        seen["locks"].add(id(start_lock) if start_lock is not None else None)
        seen["k"].add(side_by_side)
        await asyncio.sleep(0.02)
        seen["active"] -= 1
        return PolicyResult(fe.label, "r", "p", "ok", "")

    bench._row = row  # type: ignore[method-assign]
    out = asyncio.run(bench._cell(0.001, 0))
    assert [r.label for r in out] == ["row0", "row1", "row2"]  # in the rows' order
    assert [c.result.label for c in bench.cells] == ["row0", "row1", "row2"]
    if concurrent:
        assert (
            seen["most"] == 3 and seen["k"] == {3} and len(seen["locks"]) == 1 and None not in seen["locks"]
        )
    else:
        assert seen["most"] == 1 and seen["k"] == {1} and seen["locks"] == {None}


def test_a_crash_in_one_row_stops_the_rows_beside_it(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    bench = _bench(tmp_path, monkeypatch)
    cancelled: list[str] = []

    async def row(fe: Any, *a: object) -> PolicyResult:
        if fe.label == "row1":
            await asyncio.sleep(0.01)
            raise RuntimeError("row1 broke")
        try:
            await asyncio.sleep(5)
        except asyncio.CancelledError:
            cancelled.append(fe.label)  # its Supervisor stops its processes on the way out
            raise
        return PolicyResult(fe.label, "r", "p", "ok", "")

    bench._row = row  # type: ignore[method-assign,assignment]
    t0 = time.monotonic()
    with pytest.raises(ExceptionGroup) as err:
        asyncio.run(bench._cell(0.001, 0))
    assert err.group_contains(RuntimeError, match="row1 broke")
    assert sorted(cancelled) == ["row0", "row2"] and time.monotonic() - t0 < 4


def test_rows_side_by_side_split_the_client_process_cpu() -> None:
    a = CpuSnapshot(10.0, {cpu.ROUTER: 1.0, cpu.ENGINES: 2.0})
    b = CpuSnapshot(13.0, {cpu.ROUTER: 3.0, cpu.ENGINES: 6.0})
    alone = CpuUse.between(a, b, requests=100, wall_s=10.0, cores=2)
    third = CpuUse.between(a, b, requests=100, wall_s=10.0, cores=2, client_share=1 / 3)
    assert alone.client_ms_per_request == pytest.approx(30.0)
    assert third.client_ms_per_request == pytest.approx(10.0)
    assert alone.router_ms_per_request == third.router_ms_per_request == pytest.approx(20.0)
    assert third.box_share == pytest.approx((2.0 + 4.0 + 1.0) / 20.0)


def test_the_differential_harness_keeps_the_quick_it_was_documented_with(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """Its runs (docs/bench.md) used the --quick of time x0.002, one row after the other: the
    harness pins those fields, and a --bench-arg still overrides them (it comes last)."""
    cmds: list[list[str]] = []

    def child(cmd: list[str], timeout_s: float, grace_s: float) -> int:
        cmds.append(cmd)
        return 0

    monkeypatch.setattr(differential_run, "run_child", child)
    differential_run.run_bench(tmp_path, ["smetric"], 0.00256, 0, tmp_path / "t.jsonl")
    differential_run.run_bench(tmp_path, ["smetric"], 0.00256, 0, tmp_path / "t.jsonl",
                               ["--time-scale=0.02", "--picker-units=wall"])  # fmt: skip
    pinned, wall = (cli.resolve(cli.build_parser().parse_args(c[c.index("bench") + 1 :])) for c in cmds)
    assert not pinned.concurrent_rows and pinned.picker_units == "model"
    assert pinned.time_scale == pytest.approx(float(QUICK_X0002["--time-scale"]))
    assert (pinned.warmup_s, pinned.duration_s) == (1200.0, 4800.0)
    assert wall.time_scale == pytest.approx(0.02) and wall.picker_units == "wall"
    assert (wall.warmup_s, wall.duration_s) == (1200.0, 4800.0) and not wall.concurrent_rows
