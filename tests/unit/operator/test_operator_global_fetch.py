"""With a global KV tier the picker's policies get the pool's global-tier load time per token, so
their estimates (balance score, SLO check, ledger) credit a session's global-tier copy: from the
spec when given, else from the model's preset at the pool's KV dtype and parallelism."""

from __future__ import annotations

from typing import Any

import pytest

from smetric.core.presets import get_preset
from smetric.operator.render_picker import policy_config
from smetric.operator.spec import SMetricPoolSpec

QWEN = "Qwen/Qwen3-Coder-30B-A3B-Instruct"


def _fetch(model: dict[str, Any], global_kv: bool = True, parameters: dict[str, Any] | None = None) -> Any:
    spec = SMetricPoolSpec.model_validate(
        {
            "topology": {"mode": "colocated", "replicas": 2},
            "model": model,
            "globalKV": {"enabled": global_kv},
            "gpus": {"countPerPod": model.get("tensorParallelSize", 1)},
            "router": {"parameters": parameters or {}},
        }
    )
    return policy_config(spec)["policy"]["parameters"].get("globalFetchSPerToken")


@pytest.mark.parametrize(
    ("model", "preset"),
    [
        ({"name": QWEN}, "qwen3-30b-h20"),
        ({"name": QWEN, "kvCacheDtype": "fp8"}, "qwen3-30b-h20/kv=fp8"),
        ({"name": QWEN, "tensorParallelSize": 2}, "qwen3-30b-h20/tp=2"),
    ],
)
def test_a_known_model_gets_its_presets_calibrated_rate(model: dict[str, Any], preset: str) -> None:
    assert _fetch(model) == pytest.approx(get_preset(preset).global_fetch_s_per_token)


def test_fp8_kv_halves_the_bf16_rate() -> None:
    assert _fetch({"name": QWEN, "kvCacheDtype": "fp8"}) == pytest.approx(_fetch({"name": QWEN}) / 2)
    assert _fetch({"name": QWEN, "kvCacheDtype": "fp8"}) == pytest.approx(49_152 / 7.5e9)


def test_an_explicit_rate_wins() -> None:
    assert _fetch({"name": QWEN}, parameters={"globalFetchSPerToken": 1e-6}) == 1e-6


def test_no_global_tier_or_an_unknown_model_credits_local_hits_only() -> None:
    assert _fetch({"name": QWEN}, global_kv=False) is None
    assert _fetch({"name": QWEN}, global_kv=False, parameters={"globalFetchSPerToken": 1e-6}) is None
    assert _fetch({"name": "acme/unknown-model"}) is None
    assert _fetch({"name": QWEN, "tensorParallelSize": 16}) is None  # no preset variant that wide
