"""Service-level objectives (paper §4.1, §5.2).

TTFT SLO is linear in the prompt length: ``b + a * L`` with ``b = 1 s`` and ``a = 62.5 ms`` per
1K prompt tokens. TPOT SLO is 20 ms for Qwen3-30B-A3B and 33 ms for Qwen3-235B-A22B.
"""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class SloConfig:
    ttft_base_s: float = 1.0
    ttft_per_ktok_s: float = 0.0625
    tpot_s: float = 0.020

    def ttft_slo_s(self, prompt_tokens: int) -> float:
        return self.ttft_base_s + self.ttft_per_ktok_s * prompt_tokens / 1000.0

    def token_scaled(self, k: float) -> SloConfig:
        """The same SLOs per token standing for ``k`` tokens: TTFT per (scaled) kilotoken and TPOT
        per (scaled) output token ``k`` times longer (the cost-preserving token scale)."""
        return SloConfig(self.ttft_base_s, self.ttft_per_ktok_s * k, self.tpot_s * k)

    def with_overrides(self, ttft_s: float | None = None, tpot_s: float | None = None) -> SloConfig:
        """Per-request SLO headers (``x-slo-ttft-ms`` fixes TTFT; ``x-slo-tpot-ms`` fixes TPOT)."""
        return SloConfig(
            ttft_base_s=self.ttft_base_s if ttft_s is None else ttft_s,
            ttft_per_ktok_s=self.ttft_per_ktok_s if ttft_s is None else 0.0,
            tpot_s=self.tpot_s if tpot_s is None else tpot_s,
        )


PAPER_SLO_30B = SloConfig(1.0, 0.0625, 0.020)
PAPER_SLO_235B = SloConfig(1.0, 0.0625, 0.033)
