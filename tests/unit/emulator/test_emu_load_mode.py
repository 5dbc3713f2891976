"""The emulator's global tier is timed as the simulator's, with the operator's load mode."""

from __future__ import annotations

import pytest

from smetric.emulator.cli import config_from_args
from smetric.emulator.cluster import build_instances
from smetric.emulator.config import EmulatorConfig
from smetric.engine.global_tier import CALIBRATED


@pytest.mark.parametrize("mode", ["sync", "async"])
def test_the_load_mode_reaches_the_engines_tier(mode: str) -> None:
    cfg = config_from_args(["--instances", "2", "--global-tier", "full", "--global-load-mode", mode])
    (a, b) = build_instances(cfg, None)
    tier = a.engine.global_tier
    assert tier is not None and tier is b.engine.global_tier  # one tier for the process
    assert tier.synchronous == (mode == "sync")
    # the rest of the path is the simulator's calibrated one (per-GPU rate, store, lookup)
    assert tier.path.load_gbit_s_per_gpu == CALIBRATED.load_gbit_s_per_gpu
    assert tier.lookup_s == CALIBRATED.lookup_s


def test_sync_is_the_default_as_the_operator_renders() -> None:
    assert config_from_args([]).global_load_mode == "sync"


def test_a_bad_load_mode_is_refused() -> None:
    with pytest.raises(ValueError, match="--global-load-mode"):
        EmulatorConfig(global_load_mode="later")
    with pytest.raises(SystemExit):
        config_from_args(["--global-load-mode", "later"])
