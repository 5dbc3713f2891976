# The regimes of docs/evidence.md (sourced by bench/evidence_sweeps.sh and bench/evidence_variant.sh):
# evidence_regimes GO calls "GO NAME ARGS..." once per regime, ARGS the simulator's flags for it.
# 16 and 32 instances: colocated and PD x full, small and no global tier, three rates around each
# knee (four for PD and five for colocated with the small tier); full tier with asynchronous loads (LMCacheMPConnector).
evidence_regimes() {
  local go="$1" n
  local async="--global-load-mode async"
  for n in 16 32; do
    "$go" "i$n-coloc-full" --instances "$n" --mode colocated --global-tier full --rates 3.5,4,4.5
    "$go" "i$n-pd-full" --instances "$n" --mode disaggregated --global-tier full --rates 5,6,7
    "$go" "i$n-coloc-none" --instances "$n" --mode colocated --global-tier none --rates 0.5,0.75,1
    "$go" "i$n-pd-none" --instances "$n" --mode disaggregated --global-tier none --rates 0.5,0.75,1
    "$go" "i$n-coloc-small" --instances "$n" --mode colocated --global-tier small --rates 0.5,0.75,1,1.25,1.5
    "$go" "i$n-pd-small" --instances "$n" --mode disaggregated --global-tier small --rates 0.5,0.75,1,1.25
    "$go" "i$n-pd-async" --instances "$n" --mode disaggregated --global-tier full --rates 5,6,7,8 $async
    "$go" "i$n-coloc-async" --instances "$n" --mode colocated --global-tier full --rates 3.5,4,4.5,5 $async
  done
}
