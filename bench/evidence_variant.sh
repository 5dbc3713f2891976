#!/usr/bin/env bash
# SMetric alone over the regimes of bench/evidence_sweeps.sh (same seeds, windows and rates), with
# extra simulator arguments -- a policy parameter under test -- then each regime merged with the
# baselines' rows of the full sweep (bench/evidence_merge.py) for bench/evidence.py.
# Usage: bench/evidence_variant.sh BASE_DIR OUT_DIR ARGS...   e.g.
#   bench/evidence_variant.sh results/evidence results/least-loaded --param smetric.nobodyMeets=least-loaded
set -euo pipefail
BASE="$1"; OUT="$2"; shift 2
mkdir -p "$OUT"
S="smetric simulate --seeds 0,1,2 --warmup-s 1200 --measure-s 2400 --no-extend-past-knee --policies smetric"
EXTRA=("$@")
go() {
  local name="$1"; shift
  [ -f "$BASE/$name.json" ] || { echo "skip $name (no $BASE/$name.json)"; return; }
  $S "$@" "${EXTRA[@]}" --json "$OUT/$name.variant.json" > "$OUT/$name.log" 2>&1
  python bench/evidence_merge.py "$BASE/$name.json" "$OUT/$name.variant.json" "$OUT/$name.json"
  echo "$name done"
}
A="--global-load-mode async"
for n in 16 32; do
  go i$n-coloc-full --instances $n --mode colocated --global-tier full --rates 3.5,4,4.5
  go i$n-pd-full --instances $n --mode disaggregated --global-tier full --rates 5,6,7
  go i$n-coloc-none --instances $n --mode colocated --global-tier none --rates 0.5,0.75,1
  go i$n-pd-none --instances $n --mode disaggregated --global-tier none --rates 0.5,0.75,1
  go i$n-coloc-small --instances $n --mode colocated --global-tier small --rates 0.5,0.75,1,1.25,1.5
  go i$n-pd-small --instances $n --mode disaggregated --global-tier small --rates 0.5,0.75,1
  go i$n-pd-async --instances $n --mode disaggregated --global-tier full --rates 5,6,7,8 $A
  go i$n-coloc-async --instances $n --mode colocated --global-tier full --rates 3.5,4,4.5,5 $A
done
