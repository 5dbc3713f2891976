"""The simulator evidence: tables, ablations and diagnostics over ``smetric simulate`` runs
(docs/evidence.md, docs/policies.md, docs/overload.md). Each module is a command,
``python -m smetric.bench.evidence.<module> --help``.

:mod:`.knee` (SMetric against the best baseline at the knee and one step past it), :mod:`.merge`
(one policy's rows from another sweep), :mod:`.pieces` (fair rivals: baselines + the same pieces),
:mod:`.default_policy` (which policy the regime map supports), :mod:`.drift_check` (arrival
drift), :mod:`.estimates_ablation` and :mod:`.tiered_ablation` (paired ablations),
:mod:`.overload_table` and :mod:`.overload_diagnosis` (flow control, collapse past the knee),
:mod:`.global_tier_usage` (global-tier link and stall shares). The sweeps that produce their inputs
are the shell scripts in ``bench/`` (``evidence_sweeps.sh``, ``evidence_variant.sh``,
``paper_sweeps.sh``). :mod:`.inputs` checks every command's inputs and outputs before any work
(one line on stderr, exit status 2).
"""
