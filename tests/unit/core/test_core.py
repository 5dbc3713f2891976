from smetric.core.costmodel import CostModel
from smetric.core.presets import PRESETS
from smetric.core.slo import SloConfig


def test_ttft_slo_is_linear() -> None:
    slo = SloConfig()
    assert slo.ttft_slo_s(0) == 1.0
    assert abs(slo.ttft_slo_s(16_000) - 2.0) < 1e-9


def test_cost_model_fit_recovers_coefficients() -> None:
    truth = CostModel(1e-4, 1.5e-8)
    samples = [(n, L, truth.cost(n, L)) for n in (500, 2000, 8000) for L in (8000, 30000, 100000)]
    fit = CostModel.fit(samples)
    assert abs(fit.c_lin_s - truth.c_lin_s) / truth.c_lin_s < 1e-6
    assert abs(fit.c_att_s - truth.c_att_s) / truth.c_att_s < 1e-6


def test_presets_have_positive_kv_capacity() -> None:
    for preset in PRESETS.values():
        assert preset.kv_capacity_tokens > 0
        assert 5_000 < preset.cost_model.l_eq_tokens < 20_000
