"""Fair rivals: the product default, the paper-literal SMetric, the baselines as shipped and the
baselines + the same framework pieces, at one rate per regime, from `smetric simulate` JSONs.

Per regime: each policy's mean headline over seeds (TPS within SLO colocated, prefill TPS within the TTFT SLO
disaggregated), its local share of prompt tokens and the share of its decisions the overload fallback made
(reason ``overload`` for ``X+pieces``; for SMetric the fallback keeps its own reasons and is not counted here);
then the paired margins (per seed ``a / b - 1``, mean and two-sided 95 % Student t-interval; ``win`` / ``loss``
when the interval of the paired absolute differences excludes 0):

* ``smetric`` (product default) vs the best baseline as shipped, and vs the best baseline + pieces;
* ``smetric-paper`` vs the best baseline as shipped;
* the best baseline + pieces vs the best baseline as shipped.

"Best" is by mean at that rate. Usage: python -m smetric.bench.evidence.pieces OUT/i16-coloc-full.json
OUT/i16-pd-full.json [--rate 3 | --peak [--rates 8,12,16]] [--vs dynamo+pieces:dynamo]. A ``.runs.jsonl`` sidecar (an interrupted or
still running sweep; ``.runs.jsonl.gz`` as committed) is read as the JSON of the runs it holds; ``A+B``
merges two sweeps of one regime (B's runs replace A's) and ``A@smetric`` keeps one policy's runs of A.
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from smetric.bench.evidence.inputs import InputError, command, read_json
from smetric.policy.registry import BASELINE_POLICIES, BASELINES_WITH_PIECES
from smetric.sim.stats import mean_ci95, verdict
from smetric.sim.stream import read_rows

Row = Mapping[str, Any]


def headline(doc: Mapping[str, Any]) -> str:
    return (
        "tps_within_slo"
        if doc["config"].get("mode", "colocated") == "colocated"
        else "prefill_tps_within_slo"
    )


def per_seed(rows: Sequence[Row], policy: str, key: str) -> dict[int, float]:
    """The policy's value per seed; over several rates its best (its peak on that seed)."""
    out: dict[int, float] = {}
    for r in rows:
        if r["policy"] == policy and r[key] is not None and math.isfinite(float(r[key])):
            seed = int(r["seed"])
            out[seed] = max(out.get(seed, -math.inf), float(r[key]))
    return out


def margin(a: Mapping[int, float], b: Mapping[int, float]) -> str:
    seeds = sorted(set(a) & set(b))
    if not seeds:
        return "-"
    _, dci = mean_ci95([a[s] - b[s] for s in seeds])
    pm, pci = mean_ci95([100.0 * (a[s] / b[s] - 1.0) for s in seeds if b[s] > 0])
    interval = f" [{pci[0]:+.1f}, {pci[1]:+.1f}]" if pci else ""
    return f"{pm:+.1f} %{interval} {verdict(dci)} (n={len(seeds)})"


def regime(
    name: str,
    doc: Mapping[str, Any],
    rate: float | None,
    peak: bool = False,
    pairs: Sequence[tuple[str, str]] = (),
) -> str:
    """``peak``: over every rate, each policy's best per seed (its peak) instead of one rate;
    ``pairs``: more paired margins, ``(a, b)`` for "a vs b" (``-`` when either did not run)."""
    key = headline(doc)
    rows = [r for r in doc["results"] if rate is None or float(r["rate_multiplier"]) == rate]
    rates = sorted({float(r["rate_multiplier"]) for r in rows})
    if len(rates) != 1 and not peak:
        raise SystemExit(f"{name}: rows at rates {rates}; pass --rate or --peak")
    policies = list(dict.fromkeys(r["policy"] for r in rows))
    vals = {p: per_seed(rows, p, key) for p in policies}
    mean = {p: math.fsum(v.values()) / len(v) for p, v in vals.items() if v}
    out = [
        f"### {name} at {rates[0]:g}x ({key})"
        if len(rates) == 1
        else f"### {name}, peaks over {rates} ({key})",
        "",
        "| policy | mean | local share % | overload % |",
        "|---|---|---|---|",
    ]
    for p in sorted(mean, key=mean.__getitem__, reverse=True):
        prs = [r for r in rows if r["policy"] == p]
        local = 100.0 * math.fsum(float(r["local_hit_ratio"]) for r in prs) / len(prs)
        over = [
            (r.get("decision_reasons") or {}).get("overload", 0)
            / max(1, sum((r.get("decision_reasons") or {}).values()))
            for r in prs
        ]
        out.append(f"| {p} | {mean[p]:.1f} | {local:.0f} | {100.0 * math.fsum(over) / len(over):.0f} |")
    shipped = [p for p in mean if p in BASELINE_POLICIES]
    pieces = [p for p in mean if p in BASELINES_WITH_PIECES]
    best = max(shipped, key=mean.__getitem__) if shipped else None
    best_p = max(pieces, key=mean.__getitem__) if pieces else None
    out.append("")
    if best and "smetric" in vals:
        out.append(f"* smetric vs {best} (best as shipped): {margin(vals['smetric'], vals[best])}")
    if best_p and "smetric" in vals:
        out.append(f"* smetric vs {best_p} (best + pieces): {margin(vals['smetric'], vals[best_p])}")
    if best and "smetric-paper" in vals:
        out.append(f"* smetric-paper vs {best}: {margin(vals['smetric-paper'], vals[best])}")
    if best and best_p:
        out.append(f"* {best_p} vs {best}: {margin(vals[best_p], vals[best])}")
    for a, b in pairs:
        out.append(f"* {a} vs {b}: {margin(vals.get(a, {}), vals.get(b, {}))}")
    return "\n".join(out)


def sweep_name(spec: str) -> str:
    """A regime's name: its (first) file's name without ``.json``, ``.runs.jsonl`` or ``.runs.jsonl.gz``."""
    return (
        Path(spec.split("+")[0].partition("@")[0])
        .name.removesuffix(".gz")
        .removesuffix(".runs.jsonl")
        .removesuffix(".json")
    )


def load(spec: str) -> dict[str, Any]:
    """A ``smetric simulate`` JSON, or the rows of its ``.runs.jsonl`` sidecar (an interrupted or
    running sweep; gzipped as committed; a sidecar does not carry the mode: its rows are P/D rows when none has a
    colocated TPS within SLO); ``A+B``: one regime from two sweeps (the first's config, both's rows; a run of
    B -- the same policy, seed and rate -- replaces A's, so a re-run of some policies merges with the rest);
    ``A@p,q``: only policies ``p`` and ``q``'s runs of ``A`` (names without ``+``), e.g. SMetric's runs of a
    sweep whose baselines were re-run since."""
    parts: list[dict[str, Any]] = []
    for part in spec.split("+"):
        path, sep, only = part.partition("@")
        if path.endswith((".runs.jsonl", ".runs.jsonl.gz")):
            try:
                rows = list(read_rows(Path(path))[1].values())
            except OSError as exc:
                raise InputError(f"{path}: cannot read it ({exc.strerror or exc})") from None
            except ValueError as exc:  # not a sidecar: the message names the file
                raise InputError(str(exc)) from None
            pd = bool(rows) and all(r.get("tps_within_slo") is None for r in rows)
            doc_part: dict[str, Any] = {
                "config": {"mode": "disaggregated" if pd else "colocated"},
                "results": rows,
            }
        else:
            doc_part = read_json(path)
        if sep:
            keep = {p for p in only.split(",") if p}
            if not keep:
                raise InputError(f"{part}: no policy after '@'")
            doc_part = {**doc_part, "results": [r for r in doc_part["results"] if r.get("policy") in keep]}
        parts.append(doc_part)
    doc = dict(parts[0])
    runs = {
        (r.get("policy"), r.get("seed"), r.get("rate_multiplier")): r for d in parts for r in d["results"]
    }
    doc["results"] = list(runs.values())
    return doc


def parse_rates(text: str) -> list[float]:
    try:
        return [float(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r}: expected rates like 8,12,16") from None


def parse_pairs(text: str) -> list[tuple[str, str]]:
    pairs = []
    for item in text.split(","):
        a, sep, b = item.strip().partition(":")
        if not (sep and a and b):
            raise argparse.ArgumentTypeError(f"{item!r}: expected A:B, e.g. lmetric+pieces:lmetric")
        pairs.append((a, b))
    return pairs


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", nargs="+")
    ap.add_argument("--rate", type=float, default=None)
    ap.add_argument("--peak", action="store_true", help="each seed's best over the rates (the peak)")
    ap.add_argument(
        "--rates",
        type=parse_rates,
        default=None,
        help="R1,R2,...: only these rates' runs (e.g. a grid's knee, 1.5x and 2x with --peak)",
    )
    ap.add_argument(
        "--vs",
        type=parse_pairs,
        default=[],
        help="A:B[,C:D]: the paired margin of A against B too, in each regime ('-' where one did not run)",
    )
    a = ap.parse_args(argv)
    rates = None if a.rates is None else set(a.rates)
    for path in a.json:
        doc = load(path)
        if rates is not None:
            doc = {**doc, "results": [r for r in doc["results"] if float(r["rate_multiplier"]) in rates]}
        name = sweep_name(path)
        print(regime(name, doc, a.rate, a.peak, a.vs))
        print()
    return 0


if __name__ == "__main__":
    raise SystemExit(command(main, None, "python -m smetric.bench.evidence.pieces"))
