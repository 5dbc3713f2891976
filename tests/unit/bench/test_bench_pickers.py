"""``smetric bench --pickers 1,2,4 --prefix-index precise``: one picker row per replica count, all
replicas in one Envoy ext_proc cluster."""

from __future__ import annotations

import pytest

from smetric.bench.procs import BenchError
from smetric.bench.stacks import Cluster, PickerFrontend, frontends, replica_counts


def test_replica_counts_parse_and_refuse_nonsense() -> None:
    assert replica_counts("1,2,4") == [1, 2, 4] and replica_counts(" 2 ") == [2]
    for bad in ("", "0", "x", "1,-2"):
        with pytest.raises(BenchError, match="--pickers"):
            replica_counts(bad)


def test_one_row_per_replica_count_and_every_replica_in_the_cluster() -> None:
    rows = frontends(["lmetric"], [], "", pickers=[1, 2, 4], prefix_index="precise")
    assert [r.label for r in rows] == ["lmetric", "lmetric x2", "lmetric x4"]
    fe = rows[2]
    assert isinstance(fe, PickerFrontend) and fe.prefix_index == "precise"
    cluster = Cluster(("http://127.0.0.1:1",), ("127.0.0.1:1",), ("tcp://127.0.0.1:2",))
    options = fe.envoy_options(cluster, 10, 11, 20, 21, 22, 23)
    assert (options.picker_port, options.more_picker_ports) == (20, (21, 22, 23))
