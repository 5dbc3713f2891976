"""``python -m smetric.bench.evidence.merge BASE.json VARIANT.json OUT.json [--policy smetric]``: one regime's
sweep with the policy's rows taken from another sweep of the same regime (e.g. SMetric alone with
``--param smetric.nobodyMeets=least-loaded``), for ``smetric.bench.evidence.knee``. The baselines' rows are
BASE's (the runs are deterministic per policy, rate and seed, so re-running them would give the
same numbers); the variant must cover BASE's seeds and rates."""

from __future__ import annotations

import argparse
import json
from collections.abc import Sequence
from pathlib import Path

from smetric.bench.evidence.inputs import check_output, command, read_json


def merge(base: dict, variant: dict, policy: str) -> dict:
    rows = [r for r in variant["results"] if r["policy"] == policy]
    if not rows:
        raise SystemExit(f"no {policy!r} rows in the variant")
    have = {(int(r["seed"]), float(r["rate_multiplier"])) for r in rows}
    need = {(int(r["seed"]), float(r["rate_multiplier"])) for r in base["results"] if r["policy"] == policy}
    if need - have:
        raise SystemExit(f"the variant lacks {sorted(need - have)} (seed, rate)")
    out = dict(base)
    out["results"] = [r for r in base["results"] if r["policy"] != policy] + rows
    out["summary"] = [s for s in base.get("summary", []) if s.get("policy") != policy]
    out["variant_config"] = variant.get("config")
    return out


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("base")
    ap.add_argument("variant")
    ap.add_argument("out")
    ap.add_argument("--policy", default="smetric")
    a = ap.parse_args(argv)
    check_output("out", a.out)
    doc = merge(read_json(a.base), read_json(a.variant), a.policy)
    Path(a.out).write_text(json.dumps(doc))
    return 0


if __name__ == "__main__":
    raise SystemExit(command(main, None, "python -m smetric.bench.evidence.merge"))
