"""Mutation testing of the routing, admission and rendering modules (docs/mutation.md):
``python -m smetric.bench.mutation.run``. :mod:`.run` (the modules, their tests, forked runs),
:mod:`.ops` (the mutation operators), ``equivalent.txt`` (the mutants argued equivalent)."""
