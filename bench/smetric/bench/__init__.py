"""``smetric bench``: replay the agentic trace through Envoy + the picker (or a peer router) onto
emulated vLLM instances and compare routing policies end to end.

Modules: :mod:`.procs` (process supervisor, ports, health waits), :mod:`.synth` (chat message
synthesiser), :mod:`.plan` (trace -> scaled replay plan), :mod:`.replay` (closed-loop scheduler),
:mod:`.client` (streaming OpenAI client), :mod:`.promtext` / :mod:`.sampler` (engine metrics),
:mod:`.metrics` (summary), :mod:`.stacks` (what runs for one policy), :mod:`.report` (table, JSON,
plot), :mod:`.cli` (``main(argv)``); :mod:`.paired` (paired differences to any row of a bench
JSON) and :mod:`.quick_regime` (where a bench configuration lands, before running it).

Subpackages, one job each: :mod:`.chaos` (``smetric chaos``), :mod:`.latency` (the picker's data
path measured), :mod:`.evidence` (tables and ablations over simulator runs), :mod:`.mutation`
(mutation testing), :mod:`.simspeed` (simulator speed).
"""
