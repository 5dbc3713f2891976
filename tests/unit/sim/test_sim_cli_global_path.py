"""``smetric simulate`` flags of the calibrated global path and the deployment variants."""

from __future__ import annotations

import pytest

from smetric.sim import cli
from smetric.sim.simulator import SimConfig


def _sim(*argv: str) -> SimConfig:
    spec = cli._spec(cli.parser().parse_args(["--trace", "t.jsonl.gz", *argv]))
    return spec.settings[0].sim


def test_defaults_are_the_calibrated_path() -> None:
    sim = _sim()
    assert (sim.global_load_gbit_s, sim.global_store_gbit_s, sim.global_lookup_s) == (60.0, 200.0, 0.002)
    assert sim.global_write_back and sim.global_load_mode == "sync"
    assert sim.preset_name == "qwen3-30b-h20"


def test_flags_reach_the_sim_config_and_the_workload() -> None:
    argv = [
        "--global-load-gbit-s", "30", "--global-store-gbit-s", "0", "--global-lookup-ms", "0.5",
        "--global-load-mode", "async", "--no-global-write-back",
        "--kv-dtype", "fp8", "--tp", "2", "--hbm-gb", "141", "--max-context", "1048576",
    ]  # fmt: skip
    spec = cli._spec(cli.parser().parse_args(["--trace", "t.jsonl.gz", *argv]))
    sim = spec.settings[0].sim
    assert (sim.global_load_gbit_s, sim.global_store_gbit_s, sim.global_lookup_s) == (30.0, None, 0.0005)
    assert not sim.global_write_back and sim.global_load_mode == "async"
    assert sim.preset_name == "qwen3-30b-h20/kv=fp8/tp=2/hbm=141/ctx=1048576"
    # the trace is prepared (drop limit) for the variant, not the base preset
    assert spec.settings[0].workload.preset == sim.preset_name


def test_zero_load_rate_means_line_rate() -> None:
    assert _sim("--global-load-gbit-s", "0").global_load_gbit_s is None


@pytest.mark.parametrize(
    "argv",
    [
        ["--global-load-gbit-s", "-5"],
        ["--global-lookup-ms", "-1"],
        ["--tp", "0"],
        ["--hbm-gb", "5"],
    ],
)
def test_bad_values_are_clear_errors(argv: list[str]) -> None:
    with pytest.raises(ValueError):
        _sim(*argv)
    assert cli.main(["--trace", "t.jsonl.gz", *argv]) == 2


def test_placement_flags_default_to_spread_and_reach_the_path() -> None:
    assert _sim().global_path.placement == "spread"
    sim = _sim("--global-placement", "node", "--global-node-local-gbit-s", "400")
    assert (sim.global_path.placement, sim.global_path.node_local_gbit_s_per_gpu) == ("node", 400.0)
    with pytest.raises(SystemExit):
        _sim("--global-placement", "nearby")
