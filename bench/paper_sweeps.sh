#!/usr/bin/env bash
# Every simulator result quoted in README sections 2-4b, in one script: 3 seeds (paired CIs),
# Poisson family starts (--arrivals stationary: the generator those sections were taken with; the
# default is now steady agents, bench/evidence_sweeps.sh), the knee extension, 30 + 30 simulated minutes per run at 32 instances (the
# regime map: its own 20 + 20 min at 16 instances). ~40 min of CPU for sections 2-4b (~20 min on 2 idle
# cores); `--cluster local:N` or `--cluster tcp://...` (pip install 'smetric[cluster]') spreads the
# runs, and a re-run with --resume skips the runs already streamed to OUT.runs.jsonl.
# Usage: bench/paper_sweeps.sh [OUT_DIR]   (default results/)
set -euo pipefail
OUT="${1:-results}"
mkdir -p "$OUT"
S="smetric simulate --arrivals stationary --instances 32 --seeds 0,1,2 --warmup-s 1800 --measure-s 1800"
ALL=smetric,smetric-basic,smetric-overload,smetric-slo-tokens,lmetric,bailian,load-balance,llmd-session,llmd-slo,preble,dynamo,round-robin,random
B7=smetric,lmetric,bailian,llmd-session,llmd-slo,dynamo,load-balance
# README 2 and 3: colocated, full global tier, every policy (smetric-tiered: README 4c)
$S --mode colocated --global-tier full --policies $ALL --rates 1,2,2.5,3,3.5 --json "$OUT/coloc-full.json" --plot "$OUT/coloc-full.png"
# README 2: one more point between the knee (3x) and the cliff (3.5x) for the top six
$S --mode colocated --global-tier full --policies smetric,llmd-slo,lmetric,dynamo,load-balance,bailian --rates 3.25 --no-extend-past-knee --json "$OUT/coloc-full-3.25.json"
# README 3: the literal local-only `meets`, SLACK and HIT_RATIO at 3x (paired with coloc-full's 3x rows)
$S --mode colocated --global-tier full --policies smetric --local-only-slo-check --rates 2,2.5,3,3.5 --json "$OUT/ablation-local-only.json"
for slack in 0.5 0.75 1.5 2; do
  $S --policies smetric --rates 3 --no-extend-past-knee --slack "$slack" --json "$OUT/sens-slack-$slack.json"
done
for hr in 0.1 0.3 0.7 0.9; do
  $S --policies smetric --rates 3 --no-extend-past-knee --hit-ratio "$hr" --json "$OUT/sens-hit-$hr.json"
done
# README 4: PD disaggregation (prefill instances), full global tier
$S --mode disaggregated --global-tier full --policies $B7 --rates 3,4,5,6 --json "$OUT/disagg-full.json" --plot "$OUT/disagg-full.png"
$S --mode disaggregated --global-tier full --policies smetric,llmd-slo,lmetric,dynamo --rates 3.5 --no-extend-past-knee --json "$OUT/disagg-3.5.json"
$S --mode disaggregated --global-tier full --policies smetric-basic,smetric-overload,smetric-slo-tokens --rates 3,3.5,4 --no-extend-past-knee --json "$OUT/disagg-variants.json"
# README 4 (global-tier provisioning none / small / full) and 4b: the regime map, every policy
# (16 instances, 20 + 20 min, rates 1,2,3 + the knee extension; docs/simulator.md "Regime map")
smetric simulate --arrivals stationary --regime-map --json "$OUT/regime-map.json" --plot "$OUT/regime-map.png"
# README 4b: the default regime on a finer grid (the map's 1x step misplaces the peaks)
smetric simulate --arrivals stationary --instances 16 --seeds 0,1,2 --warmup-s 1200 --measure-s 1200 --no-extend-past-knee \
  --policies smetric,bailian,lmetric,dynamo,load-balance --rates 2,2.25,2.5,2.75,3 --json "$OUT/default16-fine.json"
# The simulator at the bench's scale (8 and 16 instances), for comparison with `smetric bench` (README 7).
P=smetric,lmetric,bailian,llmd-session,preble,dynamo,load-balance
smetric simulate --arrivals stationary --instances 8 --policies $P --rates 4,6,8 --json "$OUT/sim-8.json"
smetric simulate --arrivals stationary --instances 16 --policies $P --rates 4,6,8 --json "$OUT/sim-16.json"
