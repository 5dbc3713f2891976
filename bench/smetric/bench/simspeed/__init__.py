"""Simulator speed (docs/simulator.md): :mod:`.simulator` (events/s, cost against cluster size and
requests: ``python -m smetric.bench.simspeed.simulator``) and :mod:`.cluster` (the sweep executors:
inline, process pool, Dask)."""
