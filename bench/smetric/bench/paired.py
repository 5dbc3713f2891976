"""Paired TPS-within-SLO differences of every row to one reference row, from a bench JSON.

    python -m smetric.bench.paired out/q.json --ref lmetric

`smetric bench` pairs every row with its first picker policy; this recomputes the pairs against
any row from the JSON's ``per_seed`` values (same seed = same families, arrivals and messages):
mean difference, the two-sided 95 % Student t half-width, and the per-seed differences.
"""

from __future__ import annotations

import argparse
import json
from pathlib import Path
from typing import Any

from smetric.bench.sweep import paired_interval


def paired_rows(doc: dict[str, Any], ref: str) -> list[tuple[float, str, float, float | None, list[float]]]:
    """(rate, label, mean, ci95 half-width, per-seed differences) of every row but ``ref``."""
    by_rate: dict[float, dict[str, dict[int, float]]] = {}
    for row in doc["results"]:
        tps = {p["seed"]: p["tps_within_slo"] for p in row.get("per_seed", ()) if p.get("status") == "ok"}
        by_rate.setdefault(row["rate"], {})[row["label"]] = tps
    out = []
    for rate, rows in sorted(by_rate.items()):
        if ref not in rows:
            raise SystemExit(f"no row {ref!r} at rate {rate:g} (rows: {', '.join(rows)})")
        base = rows[ref]
        for label, tps in rows.items():
            if label == ref:
                continue
            diffs = [tps[s] - base[s] for s in sorted(base) if s in tps]
            mean, half = paired_interval(diffs)
            out.append((rate, label, mean, half, diffs))
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("json", type=Path, help="smetric bench --json output")
    ap.add_argument("--ref", required=True, help="label of the reference row, e.g. lmetric")
    a = ap.parse_args()
    for rate, label, mean, half, diffs in paired_rows(json.loads(a.json.read_text()), a.ref):
        ci = "n/a" if half is None else f"{half:.1f}"
        per = ", ".join(f"{d:+.1f}" for d in diffs)
        print(f"{rate:<8g} {label:<26} - {a.ref}: {mean:+.1f} ± {ci}  ({per})")


if __name__ == "__main__":
    main()
