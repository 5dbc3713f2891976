"""One simulator run's result (:class:`RunResult`) and what it is computed from: the requests sent
(:func:`request_metrics` over the measured window, :func:`request_records` per request) and the
agents' families (:func:`family_metrics`)."""

from __future__ import annotations

import math
from dataclasses import dataclass, field

import numpy as np

from smetric.core.slo import SloConfig
from smetric.sim.config import SimConfig
from smetric.sim.metrics import LoadTracker, summarise
from smetric.sim.requests import RequestRecord, RequestTable
from smetric.sim.workload import PreparedWorkload


@dataclass(frozen=True, slots=True)
class RunResult:
    policy: str
    rate_multiplier: float
    families_per_s: float
    requests_per_s: float
    metrics: dict[str, float | int]
    events: int
    sim_wall_s: float
    reasons: dict[str, int] = field(default_factory=dict)
    records: tuple[RequestRecord, ...] = ()

    def to_dict(self) -> dict[str, object]:
        return {
            "policy": self.policy,
            "rate_multiplier": self.rate_multiplier,
            "families_per_s": self.families_per_s,
            **self.metrics,
            "events": self.events,
            "sim_wall_s": self.sim_wall_s,
            "events_per_s": self.events / self.sim_wall_s if self.sim_wall_s > 0 else math.nan,
            "decision_reasons": dict(self.reasons),
        }


def request_metrics(
    cfg: SimConfig, slo: SloConfig, work: PreparedWorkload, table: RequestTable, loads: LoadTracker
) -> dict[str, float | int]:
    """The summary numbers of the requests in ``table`` (:func:`smetric.sim.metrics.summarise`)."""
    n, horizon = len(work), cfg.warmup_s + cfg.measure_s
    idx = np.array([r.key % n for r in table.rows], dtype=np.int64)
    prompt = np.array([r.prompt_tokens for r in work.engine], dtype=np.int64)[idx]
    output = np.array([r.output_tokens for r in work.engine], dtype=np.int64)[idx]
    first = table.column("first_token_s", np.float64)
    finish = table.column("finish_s", np.float64)
    done = finish if cfg.mode == "colocated" else first
    end_s = float(np.nanmax(done)) if np.isfinite(done).any() else horizon
    return summarise(
        mode=cfg.mode,
        slo=slo,
        prompt=prompt,
        output=output,
        send_s=table.column("send_s", np.float64),
        first_s=first,
        finish_s=finish,
        local=table.column("local_hit_tokens", np.int64),
        global_=table.column("global_hit_tokens", np.int64),
        dropped=work.dropped[idx],
        rejected=table.column("rejected", np.bool_),
        window_loads=loads.window_loads(max(end_s, horizon)),
        load_window_s=cfg.window_s,
        lo_s=cfg.warmup_s,
        hi_s=horizon,
    )


def family_metrics(
    cfg: SimConfig, work: PreparedWorkload, fam_start: dict[int, float], fam_done: dict[int, float]
) -> dict[str, float | int]:
    """The agents' view: how long a family (an agent's task: its sessions) took from its start
    to its last answer, over the families started in the first half of the window (the
    second half's may not end before the horizon), and the share of those that ended.
    ``fam_start`` / ``fam_done``: family key (``clone * n_families + family``) -> when it started /
    when its last session ended."""
    lo = cfg.warmup_s
    hi = lo + cfg.measure_s / 2
    started = [fk for fk, s in fam_start.items() if lo <= s < hi]
    done = [fam_done[fk] - fam_start[fk] for fk in started if fk in fam_done]
    rec = [
        (fam_done[fk] - fam_start[fk]) / max(1e-9, float(work.family_duration_s[fk % work.n_families]))
        for fk in started
        if fk in fam_done
    ]
    return {
        "families_started": len(started),
        "families_done_share": len(done) / len(started) if started else math.nan,
        "family_completion_mean_s": float(np.mean(done)) if done else math.nan,
        "family_slowdown_mean": float(np.mean(rec)) if rec else math.nan,
    }


def request_records(work: PreparedWorkload, table: RequestTable) -> tuple[RequestRecord, ...]:
    """One record per request in ``table`` (``keep_records=True``)."""
    dropped, n = work.dropped, len(work)
    return tuple(
        RequestRecord(
            r.key,
            r.send_s,
            r.first_token_s,
            r.finish_s,
            r.instance,
            bool(dropped[r.key % n]),
            r.local_hit_tokens,
            r.global_hit_tokens,
        )
        for r in table.rows
    )
