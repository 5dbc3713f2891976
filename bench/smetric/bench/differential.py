"""The differential harness's pure parts: one request's decision in both tools, matched by request
id, their agreement, and the cause each divergence is attributed to.

The bench side comes from ``smetric bench --records`` (per request: send time, TTFT, the server's
timing) and the picker's decision log (``--decision-log``: per request the endpoint chosen and
every candidate's view). The simulator side from :mod:`smetric.bench.differential_run`, which runs
the same plan (trace, steady agents, seed, load, window) through ``smetric.sim`` and records the
snapshots its router saw. Requests are matched by the bench's id ``<session>~a<agent>.<n>#<turn>``
(the agent's n-th family), which the simulator side rebuilds from its agents. Endpoint ``i`` is
engine ``i`` in both tools (the bench's engines listen on consecutive ports in pool order).

Units: every token count in model tokens (the bench's scaled counts times the cost-preserving
scale ``k``), every time in model seconds (the bench's wall seconds over the time scale).
"""

from __future__ import annotations

import math
from collections import Counter
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import orjson

# Attribution order: the first input of the decision that differs between the tools names the cause.
CAUSES = (
    "pacing",
    "tie-break",
    "prefix index",
    "gauges",
    "ledger timing",
    "global hit",
    "unattributed",
    "inherited",
)
PACING_TOLERANCE_S = 1.0  # model s: sent "at the same model time" within this
HIT_TOLERANCE_TOKENS = 256  # model tokens: hits equal within this (16 blocks at 16 tokens)


@dataclass(frozen=True, slots=True)
class EndpointView:
    """One candidate endpoint as a router saw it at a decision (model tokens, model seconds)."""

    running: int
    waiting: int
    queued_tokens: float
    local_hit_tokens: int
    global_hit_tokens: int
    stale: bool = False
    scrape_age_s: float = math.nan

    @property
    def load(self) -> int:
        return self.running + self.waiting


@dataclass(frozen=True, slots=True)
class Decision:
    """One request's routing in one tool: ``endpoint`` is the engine index (-1: not routed)."""

    request_id: str
    send_s: float
    endpoint: int
    ttft_s: float
    views: tuple[EndpointView, ...] = ()


@dataclass(frozen=True, slots=True)
class Pair:
    request_id: str
    bench: Decision
    sim: Decision

    @property
    def agree(self) -> bool:
        return self.bench.endpoint == self.sim.endpoint


def _argmax(values: Sequence[float], tolerance: float = 0.0) -> frozenset[int]:
    """Indices within ``tolerance`` of the largest value (a set: ties are ties)."""
    if not values:
        return frozenset()
    top = max(values)
    return frozenset(i for i, v in enumerate(values) if v >= top - tolerance)


def _argmin(values: Sequence[float], tolerance: float = 0.0) -> frozenset[int]:
    return _argmax([-v for v in values], tolerance)


def attribute(pair: Pair, pacing_tolerance_s: float = PACING_TOLERANCE_S) -> str:
    """The cause of a divergent decision (:data:`CAUSES`; ``""`` when both tools agree): the first
    of these that differs between the two views, in this order:

    * ``pacing``: the request was sent at a different model time (the closed loops ran apart:
      earlier TTFTs, client and router time), so the two routers decided on different states;
    * ``tie-break``: both tools saw every endpoint alike (an idle or uniform pool): each choice was
      the policy's tie-break;
    * ``prefix index``: the endpoints holding the longest local prefix differ;
    * ``gauges``: the least loaded endpoints by the scraped gauges (running + waiting) differ: a
      stale scrape, or the engines really in another state (a request reached the bench's engine
      later, by the router's and client's time, so it is still running there);
    * ``ledger timing``: the endpoints with the least queued prefill in the ledger differ;
    * ``global hit``: the global-tier hits differ;
    * ``unattributed``: every input above agrees (policy tie-breaks, the learned prefill speed).
    """
    b, s = pair.bench, pair.sim
    if b.endpoint == s.endpoint:
        return ""
    if abs(b.send_s - s.send_s) > pacing_tolerance_s:
        return "pacing"
    if not b.views or len(b.views) != len(s.views):
        return "unattributed"
    if _uniform(b.views) and _uniform(s.views):
        return "tie-break"
    tol = HIT_TOLERANCE_TOKENS
    if _argmax([v.local_hit_tokens for v in b.views], tol) != _argmax(
        [v.local_hit_tokens for v in s.views], tol
    ):
        return "prefix index"
    if _argmin([v.load for v in b.views]) != _argmin([v.load for v in s.views]):
        return "gauges"
    if _argmin([v.queued_tokens for v in b.views], tol) != _argmin([v.queued_tokens for v in s.views], tol):
        return "ledger timing"
    gb, gs = max(v.global_hit_tokens for v in b.views), max(v.global_hit_tokens for v in s.views)
    if abs(gb - gs) > tol:
        return "global hit"
    return "unattributed"


def _uniform(views: Sequence[EndpointView]) -> bool:
    """Every endpoint looks the same to the policy (scrape age aside)."""
    first = views[0]
    return all(
        (v.running, v.waiting, v.queued_tokens, v.local_hit_tokens, v.global_hit_tokens, v.stale)
        == (first.running, first.waiting, first.queued_tokens, first.local_hit_tokens, first.global_hit_tokens,
            first.stale)
        for v in views
    )  # fmt: skip


def match(bench: Iterable[Decision], sim: Iterable[Decision]) -> tuple[list[Pair], int, int]:
    """``(pairs in the bench's send order, bench-only count, simulator-only count)``: requests
    routed in both tools, matched by id."""
    by_id = {d.request_id: d for d in sim if d.endpoint >= 0}
    pairs: list[Pair] = []
    seen: set[str] = set()
    only_bench = 0
    for d in sorted(bench, key=lambda d: d.send_s):
        if d.endpoint < 0:
            continue
        other = by_id.get(d.request_id)
        if other is None:
            only_bench += 1
            continue
        seen.add(d.request_id)
        pairs.append(Pair(d.request_id, d, other))
    return pairs, only_bench, len(by_id) - len(seen)


def agreement(pairs: Sequence[Pair], pacing_tolerance_s: float = PACING_TOLERANCE_S) -> dict[str, Any]:
    """Share of matched requests routed to the same engine index, the causes of the rest
    (:func:`attribute` with ``pacing_tolerance_s``), the first divergence and the model-time gaps
    (send time, scrape ages)."""
    n = len(pairs)
    causes = Counter(session_causes(pairs, pacing_tolerance_s))
    first = next((p for p in pairs if not p.agree), None)
    dsend = [abs(p.bench.send_s - p.sim.send_s) for p in pairs]
    ages = [v.scrape_age_s for p in pairs for v in p.bench.views if math.isfinite(v.scrape_age_s)]
    sim_ages = [v.scrape_age_s for p in pairs for v in p.sim.views if math.isfinite(v.scrape_age_s)]
    return {
        "matched": n,
        "agree": sum(p.agree for p in pairs),
        "agreement": sum(p.agree for p in pairs) / n if n else math.nan,
        "agreement_same_time": _share_agree([p for p in pairs if abs(p.bench.send_s - p.sim.send_s) <= pacing_tolerance_s]),
        "causes": {c: causes.get(c, 0) for c in CAUSES},
        "first_divergence": None if first is None else _pair_doc(first, pacing_tolerance_s),
        "send_gap_s_median": _median(dsend),
        "bench_scrape_age_s_mean": sum(ages) / len(ages) if ages else math.nan,
        "sim_scrape_age_s_mean": sum(sim_ages) / len(sim_ages) if sim_ages else math.nan,
    }  # fmt: skip


def session_causes(pairs: Sequence[Pair], pacing_tolerance_s: float = PACING_TOLERANCE_S) -> list[str]:
    """The cause of each divergent pair (in ``pairs``' order): :func:`attribute` for a session's
    first divergence, ``inherited`` for its later ones (the session's KV then sits where each tool
    sent it, so its prefix hits differ as a consequence). The session is the id before ``#``."""
    diverged: set[str] = set()
    out: list[str] = []
    for p in pairs:
        if p.agree:
            continue
        session = p.request_id.rpartition("#")[0]
        out.append("inherited" if session in diverged else attribute(p, pacing_tolerance_s))
        diverged.add(session)
    return out


def _share_agree(pairs: Sequence[Pair]) -> dict[str, float]:
    return {"n": len(pairs), "agreement": sum(p.agree for p in pairs) / len(pairs) if pairs else math.nan}


def _median(xs: Sequence[float]) -> float:
    if not xs:
        return math.nan
    ys = sorted(xs)
    m = len(ys) // 2
    return ys[m] if len(ys) % 2 else (ys[m - 1] + ys[m]) / 2


def _pair_doc(p: Pair, pacing_tolerance_s: float) -> dict[str, Any]:
    def side(d: Decision) -> dict[str, Any]:
        return {
            "send_s": d.send_s, "endpoint": d.endpoint, "ttft_s": d.ttft_s,
            "views": [[v.running, v.waiting, round(v.queued_tokens), v.local_hit_tokens, v.global_hit_tokens,
                       v.scrape_age_s] for v in d.views],
        }  # fmt: skip

    return {"request_id": p.request_id, "cause": attribute(p, pacing_tolerance_s), "bench": side(p.bench), "sim": side(p.sim),
            "views_columns": ["running", "waiting", "queued_tokens", "local_hit", "global_hit", "scrape_age_s"]}  # fmt: skip


def _num(x: object, default: float = math.nan) -> float:
    return float(x) if isinstance(x, int | float) and not isinstance(x, bool) else default


def read_decisions(lines: Iterable[bytes | str], k: float, time_scale: float) -> dict[str, dict[str, Any]]:
    """The picker's decision log (JSON lines, other lines skipped): request id -> the decision's
    destination and candidate views, tokens x ``k``, scrape ages over ``time_scale``. A request
    decided twice (a retry) keeps its first decision."""
    out: dict[str, dict[str, Any]] = {}
    for line in lines:
        try:
            doc = orjson.loads(line)
        except orjson.JSONDecodeError:
            continue
        if (
            not isinstance(doc, dict)
            or doc.get("msg") != "routed"
            or not isinstance(doc.get("request_id"), str)
        ):
            continue
        views = []
        for v in doc.get("endpoints") or ():
            if not isinstance(v, dict):
                continue
            views.append(
                (str(v.get("endpoint", "")), EndpointView(
                    int(_num(v.get("running"), 0)), int(_num(v.get("waiting"), 0)),
                    _num(v.get("queued_tokens"), 0.0) * k, round(_num(v.get("local_hit_tokens"), 0) * k),
                    round(_num(v.get("global_hit_tokens"), 0) * k), bool(v.get("stale")),
                    _num(v.get("scrape_age_s")) / time_scale,
                ))
            )  # fmt: skip
        out.setdefault(doc["request_id"], {"destination": str(doc.get("destination", "")), "views": views})
    return out


def endpoint_index(addresses: Iterable[str]) -> dict[str, int]:
    """Engine index per address: the bench's engines listen on consecutive ports in pool order."""
    ports = sorted({a for a in addresses if a}, key=lambda a: int(a.rsplit(":", 1)[1]))
    return {a: i for i, a in enumerate(ports)}


def bench_decisions(
    records: Iterable[Mapping[str, Any]], decided: Mapping[str, Mapping[str, Any]], time_scale: float
) -> list[Decision]:
    """One :class:`Decision` per bench record (``smetric bench --records`` lines of one row) with
    the picker's view of it; TTFT is the emulated engine's modelled TTFT (model s)."""
    index = endpoint_index(a for d in decided.values() for a, _ in d["views"])
    out: list[Decision] = []
    for r in records:
        rid = f"{r['session_id']}#{r['turn']}"
        d = decided.get(rid)
        o = r.get("outcome") or {}
        if d is None:
            endpoint = index.get(str(o.get("served_by", "")), -1)
            views: tuple[EndpointView, ...] = ()
        else:
            endpoint = index.get(d["destination"], -1)
            by = dict(d["views"])
            views = tuple(by[a] for a in sorted(by, key=lambda a: index.get(a, 1 << 30)))
        out.append(
            Decision(
                rid, _num(r.get("sent_s")) / time_scale, endpoint, _num(o.get("engine_ttft_model_s")), views
            )
        )
    return out  # fmt: skip


def loop_delays(records: Iterable[Mapping[str, Any]], time_scale: float) -> dict[str, float]:
    """Median model seconds each request's closed loop spent outside the modelled engine in the
    bench (wall over the time scale: the replay paces sessions on the wall clock), split into
    router + client (the client's e2e minus the emulator's wall e2e) and the emulator's own clock
    (its wall e2e minus the modelled engine time at the time scale): HTTP, tokenizer and event-loop
    lag, on a loaded box mostly waiting for a core. Requests without server timing are left out."""
    router, emulator = [], []
    for r in records:
        o = r.get("outcome") or {}
        e2e, server, engine = (
            _num(o.get("e2e_s")),
            _num(o.get("server_e2e_s")),
            _num(o.get("engine_e2e_model_s")),
        )
        if o.get("ok") and math.isfinite(e2e) and math.isfinite(server) and math.isfinite(engine):
            router.append((e2e - server) / time_scale)
            emulator.append((server - engine * time_scale) / time_scale)
    r_med, e_med = _median(router), _median(emulator)
    return {"router_client_s": r_med, "emulator_clock_s": e_med, "total_s": r_med + e_med, "n": len(router)}
