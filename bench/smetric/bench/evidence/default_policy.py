"""Which policy the regime map supports as the default: per policy, in how many regimes
it is not clearly worse than the regime's best policy, and its mean relative peak.

"Not clearly worse": the upper end of the paired 95 % t interval (over seeds) of
``peak_policy(seed) / peak_best(seed) - 1`` is >= 0, where the regime's best policy has the
highest mean peak. Relative peak: mean peak / the best's mean peak. Ranked by the count, then by
the mean relative peak over the regimes::

    python -m smetric.bench.evidence.default_policy results/regime-map.json
"""

from __future__ import annotations

import argparse
import math
from collections.abc import Sequence
from dataclasses import dataclass, field
from pathlib import Path
from statistics import mean, stdev

from smetric.bench.evidence.inputs import InputError, command, read_json

T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


@dataclass
class Support:
    policy: str
    ok: int = 0  # regimes where the policy is not clearly worse than the regime's best
    rel: list[float] = field(default_factory=list)  # mean peak / best mean peak, per regime
    worse_in: list[str] = field(default_factory=list)

    @property
    def mean_rel(self) -> float:
        return mean(self.rel)


def support(peaks: dict[str, dict[str, list[float]]]) -> list[Support]:
    """``peaks``: regime -> policy -> peak TPS within SLO per seed (same seeds everywhere)."""
    out: dict[str, Support] = {}
    for regime, per_policy in peaks.items():
        means = {p: mean(v) for p, v in per_policy.items()}
        best = max(means, key=lambda p: means[p])
        for p, v in per_policy.items():
            row = out.setdefault(p, Support(p))
            row.rel.append(means[p] / means[best] if means[best] > 0 else math.nan)
            if p == best:
                row.ok += 1
                continue
            rel = [a / b - 1.0 for a, b in zip(v, per_policy[best], strict=True) if b > 0]
            m = mean(rel)
            n = len(rel)
            half = T975.get(n - 1, 1.96) * stdev(rel) / math.sqrt(n) if n > 1 else math.inf
            if m + half >= 0:
                row.ok += 1
            else:
                row.worse_in.append(
                    f"{regime} vs {best} {100 * m:+.1f} % [{100 * (m - half):+.1f}, {100 * (m + half):+.1f}]"
                )
    return sorted(out.values(), key=lambda r: (-r.ok, -r.mean_rel))


def load(path: Path) -> dict[str, dict[str, list[float]]]:
    what = "a `smetric simulate --regime-map --json` output"
    doc = read_json(path, what, keys=("summary",))
    for reg in doc["summary"]:
        if not (isinstance(reg, dict) and "regime" in reg and isinstance(reg.get("policies"), list)):
            raise InputError(f"{path}: not {what} (a summary entry without 'regime' and 'policies')")
    return {
        reg["regime"]: {p["policy"]: list(p["peak_tps_within_slo_per_seed"]) for p in reg["policies"]}
        for reg in doc["summary"]
    }


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("regime_map", type=Path, help="JSON written by smetric simulate --regime-map --json")
    a = ap.parse_args(argv)
    peaks = load(a.regime_map)
    print(
        f"| policy | regimes not clearly worse than the best (of {len(peaks)}) | mean relative peak | worst | clearly worse in |"
    )
    print("|---|---|---|---|---|")
    for r in support(peaks):
        print(
            f"| {r.policy} | {r.ok} | {100 * r.mean_rel:.1f} % | {100 * min(r.rel):.1f} % | "
            f"{'; '.join(r.worse_in) or '-'} |"
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(command(main, None, "python -m smetric.bench.evidence.default_policy"))
