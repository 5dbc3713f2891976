#!/usr/bin/env bash
# Every simulator result quoted in the README, in one script. Since issue 9 every sweep runs 3 seeds
# (paired CIs), stationary arrivals and rates past each knee, so it takes several times the former
# ~30 min on 2 cores; `--cluster local:N` or `--cluster tcp://...` (pip install 'smetric[cluster]')
# spreads the runs, and a re-run with --resume skips the runs streamed to OUT.runs.jsonl.
# Usage: bench/paper_sweeps.sh [OUT_DIR]   (default results/)
set -euo pipefail
OUT="${1:-results}"
mkdir -p "$OUT"
S="smetric simulate --instances 32"
$S --mode colocated --global-tier full --rates 2,4,5,6,7,8,10 --json "$OUT/coloc-full.json" --plot "$OUT/coloc-full.png"
$S --mode disaggregated --global-tier full --rates 4,6,8,10,12 --json "$OUT/disagg-full.json" --plot "$OUT/disagg-full.png"
$S --mode colocated --global-tier none --rates 0.5,1,1.5,2,3 --json "$OUT/coloc-none.json" --plot "$OUT/coloc-none.png"
$S --mode colocated --global-tier small --rates 2,4,6 --json "$OUT/coloc-small.json"
$S --mode colocated --policies smetric --local-only-slo-check --rates 5,6,7,8 --json "$OUT/ablation-local-only.json"
for slack in 0.5 0.75 1.5 2; do
  $S --policies smetric --rates 6 --slack "$slack" --json "$OUT/sens-slack-$slack.json"
done
for hr in 0.1 0.3 0.7 0.9; do
  $S --policies smetric --rates 6 --hit-ratio "$hr" --json "$OUT/sens-hit-$hr.json"
done
$S --mode colocated --global-tier small --policies smetric,smetric-slo-tokens --local-only-slo-check --rates 2 --json "$OUT/coloc-small-local-only.json"
# The simulator at the bench's scale (8 and 16 instances), for comparison with `smetric bench`.
P=smetric,lmetric,bailian,llmd-session,preble,dynamo,load-balance
$S --instances 8 --policies $P --rates 4,6,8 --json "$OUT/sim-8.json"
$S --instances 16 --policies $P --rates 4,6,8 --json "$OUT/sim-16.json"
# The regime map (docs/simulator.md "Regime map"; <= 30 min on 2 cores by design).
smetric simulate --regime-map --json "$OUT/regime-map.json" --plot "$OUT/regime-map.png"
