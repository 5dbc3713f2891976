#!/usr/bin/env bash
# One SMetric-family policy alone over the regimes of bench/evidence_regimes.sh (same seeds,
# windows and rates as bench/evidence_sweeps.sh), with extra simulator arguments -- a policy
# parameter under test -- then each regime merged with the baselines' rows of the full sweep
# (python -m smetric.bench.evidence.merge) for python -m smetric.bench.evidence.knee (--policy POLICY).
# Usage: [POLICY=smetric] bench/evidence_variant.sh BASE_DIR OUT_DIR ARGS...   e.g.
#   bench/evidence_variant.sh results/evidence results/least-loaded --param smetric.nobodyMeets=least-loaded
#   POLICY=smetric-tiered bench/evidence_variant.sh results/evidence results/tiered
set -euo pipefail
BASE="$1"; OUT="$2"; shift 2
POLICY="${POLICY:-smetric}"
mkdir -p "$OUT"
S="smetric simulate --seeds 0,1,2 --warmup-s 1200 --measure-s 2400 --no-extend-past-knee --policies $POLICY"
EXTRA=("$@")
go() {
  local name="$1"; shift
  [ -f "$BASE/$name.json" ] || { echo "skip $name (no $BASE/$name.json)"; return; }
  $S "$@" "${EXTRA[@]}" --json "$OUT/$name.variant.json" > "$OUT/$name.log" 2>&1
  python -m smetric.bench.evidence.merge "$BASE/$name.json" "$OUT/$name.variant.json" "$OUT/$name.json" --policy "$POLICY"
  echo "$name done"
}
# shellcheck source=bench/evidence_regimes.sh
source "$(dirname "$0")/evidence_regimes.sh"
evidence_regimes go
