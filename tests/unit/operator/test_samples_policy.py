"""The samples and the docs agree with the advised default policy: no sample pins a policy (the
operator picks per pool: ``smetric``, with or without a global KV tier), docs/picker.md
states the picker's own default, and the colocated sample's ``globalFetchSPerToken`` matches its FP8
KV at the calibrated 7.5 GB/s."""

from __future__ import annotations

import re
from pathlib import Path

import pytest
import yaml

from smetric.core.presets import PRESETS
from smetric.epp.config import PolicySection
from smetric.operator.spec import parse_spec
from smetric.policy.params_mapping import fetch_s_per_token
from smetric.policy.registry import default_policy

ROOT = Path(__file__).resolve().parents[3]
POOLS = [p for p in sorted((ROOT / "manifests" / "samples").glob("*.yaml")) if p.stem != "gateway"]
CALIBRATED_GBIT_S = 60.0  # 7.5 GB/s per GPU: docs/simulator.md, SimConfig.global_load_gbit_s


@pytest.mark.parametrize("sample", POOLS, ids=lambda p: p.stem)
def test_samples_leave_the_policy_to_the_operator(sample: Path) -> None:
    (pool,) = [d for d in yaml.safe_load_all(sample.read_text()) if d]
    assert "policy" not in pool["spec"].get("router", {}), sample.name
    spec = parse_spec(pool["spec"])
    assert spec.routing_policy == default_policy(spec.global_kv.enabled)


def test_picker_doc_states_the_pickers_and_the_operators_defaults() -> None:
    intro = (ROOT / "docs" / "picker.md").read_text().split("```", 1)[0]
    assert "SMetric by default" not in intro
    tier = PolicySection.model_validate({"parameters": {"globalFetchSPerToken": 1e-5}}).name
    # one default since 5 Dec 2026: the picker's --config default, with and without a tier, the operator's
    assert PolicySection().name == tier == default_policy(True) == default_policy(False)
    assert f"`{tier}`, with or without a global KV tier" in " ".join(intro.split())


def test_colocated_sample_fetch_rate_is_its_fp8_kv_at_the_calibrated_rate() -> None:
    text = (ROOT / "manifests" / "samples" / "colocated-qwen3-coder-30b.yaml").read_text()
    (pool,) = [d for d in yaml.safe_load_all(text) if d]
    assert pool["spec"]["model"]["kvCacheDtype"] == "fp8"
    model = PRESETS["qwen3-30b-h20"].model
    fp8_bytes = 2 * model.n_layers * model.n_kv_heads * model.head_dim * 1
    assert fp8_bytes == 49_152 and f"{fp8_bytes:,} bytes/token" in text
    (stated,) = re.findall(r"globalFetchSPerToken: ([0-9.e-]+)\}", text)
    assert float(stated) == pytest.approx(fetch_s_per_token(fp8_bytes, CALIBRATED_GBIT_S), rel=1e-3)
    assert "7.5 GB/s" in text and "25 GB/s" in text  # the calibrated rate, not the line rate
