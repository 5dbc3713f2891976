"""CPU time of the bench's processes, to say how much of the box a row used.

Every child the :class:`~smetric.bench.procs.Supervisor` starts leads its own process group
(``start_new_session``), so a child's CPU is the sum over the processes of its group (a picker's
workers, Envoy's threads are counted with their process). Read from ``/proc`` (Linux): user +
system time of the live processes, in seconds. Where ``/proc`` cannot be read the figures are NaN
(the row is then reported without them, never failed)."""

from __future__ import annotations

import math
import os
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

_TICK_S = 1.0 / os.sysconf("SC_CLK_TCK") if hasattr(os, "sysconf") else 0.01
ROUTER = "router"  # Envoy + pickers, or vllm-router: every supervised child but the emulator
ENGINES = "emulator"


def _stat_fields(text: str) -> list[str]:
    """The fields after the command name (which may hold spaces and parentheses)."""
    return text[text.rindex(")") + 2 :].split()


def group_cpu_s(groups: Iterable[int], proc: Path = Path("/proc")) -> dict[int, float]:
    """User + system CPU seconds of the live processes of each process group (NaN: unreadable)."""
    wanted = set(groups)
    out = dict.fromkeys(wanted, 0.0)
    try:
        entries = [p for p in proc.iterdir() if p.name.isdigit()]
    except OSError:
        return dict.fromkeys(wanted, math.nan)
    for entry in entries:
        try:
            fields = _stat_fields((entry / "stat").read_text())
        except (OSError, ValueError):
            continue  # the process ended while we looked
        # after the name: state(0) ppid(1) pgrp(2) ... utime(11) stime(12)
        pgrp = int(fields[2])
        if pgrp in wanted:
            out[pgrp] += (int(fields[11]) + int(fields[12])) * _TICK_S
    return out


def own_cpu_s() -> float:
    """This process's user + system CPU seconds (the client: replay, HTTP, parsing, sampling)."""
    t = os.times()
    return t.user + t.system


@dataclass(frozen=True, slots=True)
class CpuSnapshot:
    """CPU seconds so far: the client (this process) and each role's children."""

    client_s: float
    roles_s: Mapping[str, float]

    @classmethod
    def take(cls, children: Mapping[str, int], proc: Path = Path("/proc")) -> CpuSnapshot:
        """``children``: supervised name -> pid (= its process group)."""
        per_group = group_cpu_s(children.values(), proc)
        roles: dict[str, float] = {}
        for name, pid in children.items():
            role = ENGINES if name == ENGINES else ROUTER
            roles[role] = roles.get(role, 0.0) + per_group.get(pid, math.nan)
        return cls(own_cpu_s(), roles)


@dataclass(frozen=True, slots=True)
class CpuUse:
    """CPU used between two snapshots, per request and as a share of the box."""

    router_ms_per_request: float
    client_ms_per_request: float
    engines_ms_per_request: float
    box_share: float  # all of it / (wall seconds x cores): 1.0 = every core busy with the bench

    @classmethod
    def between(
        cls,
        a: CpuSnapshot,
        b: CpuSnapshot,
        requests: int,
        wall_s: float,
        cores: int | None = None,
        client_share: float = 1.0,
    ) -> CpuUse:
        """``client_share``: this row's part of the client process's CPU (``1 / k`` when ``k`` rows
        run side by side in it: split evenly, since one process's time cannot be told apart)."""
        n = max(requests, 1)
        ncpu = cores or os.cpu_count() or 1

        def delta(role: str) -> float:
            return b.roles_s.get(role, math.nan) - a.roles_s.get(role, math.nan)

        router, engines = delta(ROUTER), delta(ENGINES)
        client = (b.client_s - a.client_s) * client_share
        total = sum(v for v in (router, engines, client) if not math.isnan(v))
        share = total / (wall_s * ncpu) if wall_s > 0 else math.nan
        return cls(1000 * router / n, 1000 * client / n, 1000 * engines / n, share)


def picker_timers(time_scale: float) -> dict[str, float | str]:
    """The picker's scrape interval in wall and in model time. It runs at real speed while the
    engines run ``1 / time_scale`` times faster, so its engine gauges are ``refresh / time_scale``
    model seconds old at worst (the simulator's picker: ``refresh`` model seconds;
    ``--compare-sim`` gives the simulator the bench's interval, ``smetric simulate --refresh-ms``)."""
    from smetric.core.pickerflags import FLAGS

    refresh_ms = float(next(f.default for f in FLAGS if f.name == "refresh-interval-ms"))  # type: ignore[arg-type]
    return {
        "picker_refresh_wall_ms": refresh_ms,
        "picker_refresh_model_s": refresh_ms / 1000.0 / time_scale,
        "note": "engine gauges (queue, KV usage) only; the prefix index follows the engines' KV events "
        "as they come and the picker's own in-flight ledger updates at each pick",
    }
