"""``python -m smetric.bench.differential_seeds FILE...``: one regime's differential runs over several seeds.

Each FILE is a ``differential_run --json`` output (gzipped or not) of the same regime (instances, tier, load) on
another seed. Per policy: the bench's and the simulator's TPS within SLO per seed and their means, the bench's
seed spread (its standard deviation over the seeds), and the bench minus the simulator paired by seed (mean and
95 % t-interval). Then Spearman's rho between the two tools' rankings of the **seed means** beside each seed's own
rho: one seed ranks one draw of the workload, the means rank the policies (docs/bench.md, "Without a global tier").

A simulator's TPS counts as inside the bench's spread when it lies within the bench's mean +- 2 standard
deviations over the seeds; the paired interval says whether the gap between the tools is systematic.
"""

from __future__ import annotations

import argparse
import math
import statistics
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from smetric.bench.compare import spearman
from smetric.bench.evidence.inputs import InputError, command, read_json
from smetric.sim.stats import mean_ci95

SIM_VIEW = "as is"  # the simulator as it is, the plan's own arrival times (differential_run's first column)
DIFF = "a `differential_run --json` output"
DIFF_KEYS = ("seed", "policies", "spearman")


@dataclass(frozen=True)
class PolicyAcrossSeeds:
    policy: str
    bench: dict[int, float]  # seed -> TPS within SLO
    sim: dict[int, float]

    @property
    def seeds(self) -> list[int]:
        return sorted(set(self.bench) & set(self.sim))

    def mean(self, side: Mapping[int, float]) -> float:
        return math.fsum(side[s] for s in self.seeds) / max(1, len(self.seeds))

    @property
    def bench_sd(self) -> float:
        xs = [self.bench[s] for s in self.seeds]
        return statistics.stdev(xs) if len(xs) > 1 else math.nan

    def gap(self) -> tuple[float, tuple[float, float] | None]:
        """The bench minus the simulator, paired by seed: mean and 95 % t-interval (None below two seeds)."""
        return mean_ci95([self.bench[s] - self.sim[s] for s in self.seeds])

    def inside_spread(self) -> bool:
        sd = self.bench_sd
        return math.isfinite(sd) and abs(self.mean(self.sim) - self.mean(self.bench)) <= 2.0 * sd


def load(path: str) -> dict[str, Any]:
    """A ``differential_run --json`` output (gzipped or not); a missing, malformed or other document is an
    :class:`InputError` (one line through :func:`smetric.bench.evidence.inputs.command`)."""
    return read_json(path, DIFF, DIFF_KEYS)


def collect(docs: Sequence[Mapping[str, Any]], view: str = SIM_VIEW) -> list[PolicyAcrossSeeds]:
    out: dict[str, PolicyAcrossSeeds] = {}
    for doc in docs:
        seed = int(doc["seed"])
        for name, p in doc["policies"].items():
            if view not in p:
                raise InputError(
                    f"seed {seed}, {name}: no simulator view {view!r} (it has {', '.join(map(repr, p))})"
                )
            row = out.setdefault(name, PolicyAcrossSeeds(name, {}, {}))
            row.bench[seed] = float(p["tps_within_slo_bench"])
            row.sim[seed] = float(p[view]["tps_within_slo_sim"])
    return list(out.values())


def rho_of_means(rows: Sequence[PolicyAcrossSeeds]) -> float:
    return spearman([r.mean(r.bench) for r in rows], [r.mean(r.sim) for r in rows])


def report(docs: Sequence[Mapping[str, Any]], view: str = SIM_VIEW) -> str:
    rows = collect(docs, view)
    seeds = sorted({int(d["seed"]) for d in docs})
    lines = [
        f"seeds {', '.join(map(str, seeds))}: TPS within SLO, bench / simulator ({view})",
        "",
        "| policy | bench per seed | bench mean (sd) | simulator per seed | simulator mean | bench - simulator,"
        " paired | inside the bench's spread |",
        "|---|---|---|---|---|---|---|",
    ]
    for r in sorted(rows, key=lambda r: -r.mean(r.sim)):
        m, ci = r.gap()
        interval = f" [{ci[0]:+.1f}, {ci[1]:+.1f}]" if ci else ""
        lines.append(
            f"| {r.policy} | {' / '.join(f'{r.bench[s]:.1f}' for s in r.seeds)} | {r.mean(r.bench):.1f}"
            f" ({r.bench_sd:.1f}) | {' / '.join(f'{r.sim[s]:.1f}' for s in r.seeds)} | {r.mean(r.sim):.1f}"
            f" | {m:+.1f}{interval} | {'yes' if r.inside_spread() else 'no'} |"
        )
    per_seed = ", ".join(f"seed {int(d['seed'])} {float(d['spearman'][view]):+.2f}" for d in docs)
    lines += ["", f"rho of the seed means: {rho_of_means(rows):+.2f} (per seed: {per_seed})"]
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m smetric.bench.differential_seeds", description=__doc__)
    ap.add_argument("files", nargs="+", help="differential_run --json outputs of one regime, one per seed")
    ap.add_argument(
        "--view",
        default=SIM_VIEW,
        help="the simulator's variant to compare with (differential_run's columns: 'as is', \"bench's loop\", "
        "'loop+scrape', \"bench's sends\")",
    )
    a = ap.parse_args(argv)
    print(report([load(f) for f in a.files], a.view))
    return 0


if __name__ == "__main__":
    raise SystemExit(command(main, None, "python -m smetric.bench.differential_seeds"))
