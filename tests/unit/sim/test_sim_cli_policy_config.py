"""``smetric simulate --policy-config FILE`` reads the picker's config file unchanged."""

from __future__ import annotations

from pathlib import Path

import pytest

from smetric.epp.config import load_config, policy_params
from smetric.operator.render_picker import policy_config_text
from smetric.operator.spec import parse_spec
from smetric.policy.params import SMetricParams
from smetric.policy.tiered_params import SMetricTieredParams
from smetric.sim import cli
from smetric.sim.simulator import SimConfig, simulate
from tests.support.sim_synth import comparable, work


def deployed_config(tmp_path: Path, policy: str, parameters: dict[str, object]) -> Path:
    """The picker's config.yaml exactly as the operator renders it into the ConfigMap."""
    spec = parse_spec(
        {
            "model": {"name": "Qwen/Qwen3-Coder-30B-A3B-Instruct"},
            "topology": {"replicas": 4},
            "router": {"policy": policy, "parameters": parameters},
        }
    )
    path = tmp_path / "config.yaml"
    path.write_text(policy_config_text(spec), encoding="utf-8")
    return path


def spec_of(*argv: str) -> tuple[cli.SweepSpec, list[str]]:
    notes: list[str] = []
    spec = cli._spec(cli.parser().parse_args(["--trace", "t.jsonl.gz", *argv]), notes)
    return spec, notes


def test_the_deployed_file_gives_the_pickers_own_parameters_and_policy(tmp_path: Path) -> None:
    f = deployed_config(tmp_path, "smetric-tiered", {"slack": 1.5, "tiered": {"footprint": False}})
    spec, notes = spec_of("--policy-config", str(f))
    assert spec.policies == ("smetric-tiered",)
    picker = policy_params(load_config(f))  # what smetric-epp --config FILE builds
    assert spec.sim.own_params == picker.own
    own = picker.get(SMetricTieredParams)
    assert own.slack == 1.5 and not own.tiered.footprint and own.tiered.global_aware
    # mode, SLO and block size are the simulated cluster's; the note says so
    assert any("blockTokens" in n and "mode" in n for n in notes)


def test_flags_override_the_file_and_policies_can_be_chosen(tmp_path: Path) -> None:
    f = deployed_config(tmp_path, "smetric", {"slack": 1.5, "hitRatio": 0.4})
    spec, _ = spec_of("--policy-config", str(f), "--slack", "2.0", "--policies", "smetric,lmetric")
    assert spec.policies == ("smetric", "lmetric")
    (own,) = [m for m in spec.sim.own_params if type(m) is SMetricParams]
    assert (own.slack, own.hit_ratio) == (2.0, 0.4)


def test_without_a_file_the_defaults_are_the_models(tmp_path: Path) -> None:
    spec, _ = spec_of("--policies", "smetric")
    assert spec.sim.policy_parameters == "{}" and spec.sim.own_params == ()


def test_a_bad_file_is_a_clear_error(tmp_path: Path) -> None:
    bad = tmp_path / "bad.yaml"
    bad.write_text("policy:\n  name: smetric\n  parameters: {slack: 0}\n", encoding="utf-8")
    with pytest.raises(ValueError, match="slack"):
        spec_of("--policy-config", str(bad))
    assert cli.main(["--trace", "t.jsonl.gz", "--policy-config", str(bad)]) == 2


def test_context_keys_are_not_policy_parameters() -> None:
    with pytest.raises(ValueError, match="context keys"):
        SimConfig(policy_parameters='{"mode": "disaggregated"}')


def test_simulating_the_file_equals_simulating_the_same_flags(tmp_path: Path) -> None:
    f = deployed_config(tmp_path, "smetric", {"slack": 0.01})
    from_file, _ = spec_of("--policy-config", str(f))
    from_flags, _ = spec_of("--policies", "smetric", "--slack", "0.01")
    # Poisson family starts: 0.08 families/s of the synthetic trace load the 4 instances
    base = SimConfig(instances=4, warmup_s=0.0, measure_s=600.0, seed=3, arrivals="stationary")
    w = work()
    a = simulate(w, "smetric", 0.08, base.with_params(**_mapping(from_file.sim)))
    b = simulate(w, "smetric", 0.08, base.with_params(**_mapping(from_flags.sim)))
    c = simulate(w, "smetric", 0.08, base)
    assert comparable(a.to_dict()) == comparable(b.to_dict())
    assert a.metrics != c.metrics  # SLACK 0.01: nobody meets, no migration


def _mapping(sim: SimConfig) -> dict[str, object]:
    import json

    out: dict[str, object] = json.loads(sim.policy_parameters)
    return out


def test_an_upstream_endpoint_picker_config_is_refused_clearly(tmp_path: Path) -> None:
    """The simulator reads the picker's own format (the core's schema); only smetric-epp
    translates GIE's EndpointPickerConfig."""
    upstream = tmp_path / "epc.yaml"
    upstream.write_text(
        "apiVersion: inference.networking.x-k8s.io/v1alpha1\nkind: EndpointPickerConfig\n"
        "plugins: [{type: smetric-picker}]\n",
        encoding="utf-8",
    )
    with pytest.raises(ValueError, match="upstream EndpointPickerConfig"):
        spec_of("--policy-config", str(upstream))
    assert cli.main(["--trace", "t.jsonl.gz", "--policy-config", str(upstream)]) == 2
    with pytest.raises(ValueError, match="cannot read config"):
        spec_of("--policy-config", str(tmp_path / "absent.yaml"))
