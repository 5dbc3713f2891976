"""The flow-control evidence table of docs/overload.md from `smetric simulate --json` outputs (or
their `.runs.jsonl` sidecars, read while a sweep runs, or gzipped as `docs/data` keeps them): per (policy, rate) and flow control off /
on, the mean over seeds of TPS within SLO (colocated) or prefill tokens/s within SLO (P/D), the
shed share, the agents' family completion time and slowdown, and the share of families done.

    python -m smetric.bench.evidence.overload_table off.json "fc ttl 2 s=on.json"
    python -m smetric.bench.evidence.overload_table --policies smetric,dynamo --local knee.runs.jsonl on.json

Each file argument is optionally prefixed by ``LABEL=`` (the flow-control column shows the
label, else on / off). ``--policies`` keeps only those policies' rows (a sweep of twenty policies
read beside a sweep of four); ``--local`` adds the mean local share of prompt tokens
(``local_hit_ratio``).
"""

from __future__ import annotations

import argparse
import json
import math
import sys
from collections import defaultdict
from collections.abc import Sequence
from pathlib import Path

from smetric.bench.evidence.inputs import InputError, check_rows, command, read_json, read_text


def rows(path: Path) -> list[dict[str, object]]:
    if path.name.endswith((".jsonl", ".jsonl.gz")):  # a sidecar, plain or gzipped as committed
        lines = read_text(path, "a sweep sidecar").splitlines()
        out = []
        for n, line in enumerate(lines, 1):
            try:
                r = json.loads(line)
            except json.JSONDecodeError as exc:
                raise InputError(f"{path}:{n}: not valid JSON ({exc.msg})") from None
            if isinstance(r, dict) and "row" in r:
                out.append(r["row"])
        check_rows(path, out, "an overload_diagnosis output")
        return out
    return list(read_json(path)["results"])


def mean(xs: list[float]) -> float:
    xs = [x for x in xs if x is not None and not math.isnan(x)]
    return sum(xs) / len(xs) if xs else math.nan


def main(argv: Sequence[str] | None = None) -> int:
    ap = argparse.ArgumentParser(prog="python -m smetric.bench.evidence.overload_table")
    ap.add_argument("files", nargs="+", metavar="[LABEL=]FILE")
    ap.add_argument("--policies", help="comma-separated: only these policies' rows")
    ap.add_argument("--local", action="store_true", help="add the local share of prompt tokens")
    args = ap.parse_args(sys.argv[1:] if argv is None else argv)
    keep = {p.strip() for p in args.policies.split(",") if p.strip()} if args.policies else None
    groups: dict[tuple[str, float, str], list[dict[str, object]]] = defaultdict(list)
    for arg in args.files:
        label, sep, name = arg.rpartition("=")
        for r in rows(Path(name)):
            if keep is not None and r["policy"] not in keep:
                continue
            fc = label if sep else ("on" if "fc_shed_share" in r else "off")
            groups[(str(r["policy"]), float(r["rate_multiplier"]), fc)].append(r)  # type: ignore[arg-type]
    columns = ["policy", "load", "flow control", "seeds", "TPS@SLO (prefill ktok/s P/D)", "shed share", "failed",
               "family completion s", "slowdown", "families done"] + (["local %"] if args.local else [])  # fmt: skip
    print("| " + " | ".join(columns) + " |")
    print("|---" * len(columns) + "|")
    for (policy, rate, fc), rs in sorted(groups.items(), key=lambda kv: (kv[0][1], kv[0][0], kv[0][2])):
        tps = [float(r["tps_within_slo"]) if r.get("tps_within_slo") is not None else math.nan for r in rs]  # type: ignore[arg-type]
        if all(math.isnan(x) for x in tps):
            tps = [float(r["prefill_tps_within_slo"]) / 1e3 for r in rs]  # type: ignore[arg-type]

        def get(k: str, rs: list[dict[str, object]] = rs) -> float:
            return mean([float(r[k]) if r.get(k) is not None else math.nan for r in rs])  # type: ignore[arg-type]

        on = "fc_shed_share" in rs[0]
        shed = f"{100 * get('fc_shed_share'):.1f} %" if on else "-"
        failed = f"{100 * get('fc_failed_share'):.1f} %" if on else "-"
        print(
            f"| {policy} | {rate:g}x | {fc} | {len(rs)} | {mean(tps):.0f} "
            f"({', '.join(f'{x:.0f}' for x in tps)}) | {shed} | {failed} | {get('family_completion_mean_s'):.0f} | "
            f"{get('family_slowdown_mean'):.2f} | {100 * get('families_done_share'):.0f} % |"
            + (f" {100 * get('local_hit_ratio'):.0f} |" if args.local else "")
        )
    return 0


if __name__ == "__main__":
    raise SystemExit(command(main, None, "python -m smetric.bench.evidence.overload_table"))
