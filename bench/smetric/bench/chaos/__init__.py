"""``smetric chaos``: the chaos suite. A real Envoy + picker + emulated engines broken one fault at
a time (docs/chaos.md).

Modules: :mod:`.cli` (``main(argv)``, the fault and guard registries :data:`~.cli.FAULTS` /
:data:`~.cli.GUARDS`), :mod:`.stack` (the processes of one run), :mod:`.guards` (each guard and how
the stack is built without it), :mod:`.unguarded` (the picker with a guard patched out), :mod:`.row`
(one table line), :mod:`.cpu` (CPU-second clocks); the faults by subject: :mod:`.faults` (process
kills and stops, floods), :mod:`.api`, :mod:`.bodies`, :mod:`.fairness`, :mod:`.failing`,
:mod:`.frozen`, :mod:`.gateway`, :mod:`.headers`, :mod:`.stale`, :mod:`.state`, :mod:`.uploads`.
"""
