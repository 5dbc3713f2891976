"""Prefill cost model (paper Eq. 1): ``cost(n, L) = c_lin * n + c_att * n * (L - n / 2)``.

``n`` is the number of uncached prompt tokens on an instance, ``L`` the prompt length. The
coefficients are seconds on the reference instance, so a cost is "seconds of prefill on an
instance of the preset's kind"; an instance's *speed* (1.0 = as modelled) converts cost to time.

Presets: ``c_lin`` from the roofline of the linear layers (2 FLOPs per active parameter per token,
at peak bf16 FLOP/s times a model-FLOPs-utilisation factor), ``c_att = c_lin / L_eq`` with the
public fits of ``L_eq`` quoted in ``shared/reference/algorithms.md`` (Qwen3-30B-A3B 6.9k,
Qwen3-235B-A22B 13.6k). See :mod:`smetric.core.presets` for the numbers and their sources.
"""

from __future__ import annotations

import csv
from collections.abc import Iterable
from dataclasses import dataclass
from pathlib import Path

import numpy as np


@dataclass(frozen=True, slots=True)
class CostModel:
    c_lin_s: float
    c_att_s: float

    def cost(self, n_tokens: float, prompt_tokens: float) -> float:
        n = max(0.0, min(float(n_tokens), float(prompt_tokens)))
        return self.c_lin_s * n + self.c_att_s * n * (prompt_tokens - n / 2.0)

    def chunk_cost(self, start_tokens: float, chunk_tokens: float) -> float:
        """Cost of prefilling tokens ``[start, start+chunk)`` given ``start`` tokens already in KV."""
        end = start_tokens + chunk_tokens
        return self.cost(end - start_tokens, end)

    def token_scaled(self, k: float) -> CostModel:
        """The same costs per token standing for ``k`` tokens: ``cost'(n, L) = cost(k n, k L)``,
        i.e. ``c_lin k`` and ``c_att k^2`` (the cost-preserving token scale, smetric.engine.roofline)."""
        return CostModel(c_lin_s=self.c_lin_s * k, c_att_s=self.c_att_s * k * k)

    @property
    def l_eq_tokens(self) -> float:
        return self.c_lin_s / self.c_att_s if self.c_att_s > 0 else float("inf")

    @staticmethod
    def from_l_eq(c_lin_s: float, l_eq_tokens: float) -> CostModel:
        return CostModel(c_lin_s=c_lin_s, c_att_s=c_lin_s / l_eq_tokens)

    @staticmethod
    def fit(samples: Iterable[tuple[float, float, float]]) -> CostModel:
        """Least-squares fit from queue-free prefill samples ``(n, L, seconds)``.

        Coefficients are constrained to be non-negative (a negative one is refitted as zero).
        Raises ``ValueError`` with fewer than two samples or degenerate inputs.
        """
        rows = [(float(n), float(n) * (float(L) - float(n) / 2.0), float(s)) for n, L, s in samples]
        if len(rows) < 2:
            raise ValueError("cost-model fit needs at least two (n, L, seconds) samples")
        arr = np.asarray(rows, dtype=np.float64)
        x, y = arr[:, :2], arr[:, 2]
        coef, *_ = np.linalg.lstsq(x, y, rcond=None)
        c_lin, c_att = float(coef[0]), float(coef[1])
        if c_att < 0:
            c_lin, c_att = float(np.dot(x[:, 0], y) / np.dot(x[:, 0], x[:, 0])), 0.0
        elif c_lin < 0:
            c_lin, c_att = 0.0, float(np.dot(x[:, 1], y) / np.dot(x[:, 1], x[:, 1]))
        if c_lin <= 0 and c_att <= 0:
            raise ValueError("cost-model fit is degenerate (all-zero coefficients)")
        return CostModel(c_lin_s=c_lin, c_att_s=c_att)


def read_samples_csv(path: str | Path) -> list[tuple[float, float, float]]:
    """Prefill samples ``(n, L, seconds)`` from a CSV file with a header naming the columns
    ``n``, ``L`` and ``seconds`` (other columns are ignored).

    Each sample needs ``0 <= n <= L`` and ``seconds > 0``; a missing column, a non-numeric
    value or an out-of-range row raises ``ValueError`` naming the file and line.
    """
    p = Path(path)
    with p.open(newline="") as fh:
        reader = csv.DictReader(fh)
        missing = {"n", "L", "seconds"} - set(reader.fieldnames or ())
        if missing:
            raise ValueError(f"{p}: missing column(s) {', '.join(sorted(missing))} (need n, L, seconds)")
        out: list[tuple[float, float, float]] = []
        for row in reader:
            where = f"{p}:{reader.line_num}"
            try:
                n, L, s = float(row["n"]), float(row["L"]), float(row["seconds"])
            except (TypeError, ValueError):
                raise ValueError(f"{where}: n, L and seconds must be numbers, got {row!r}") from None
            if not (0 <= n <= L and s > 0 and np.isfinite(L) and np.isfinite(s)):
                raise ValueError(f"{where}: need 0 <= n <= L and seconds > 0, got n={n}, L={L}, seconds={s}")
            out.append((n, L, s))
    return out


def fit_csv(path: str | Path) -> CostModel:
    """:meth:`CostModel.fit` on the samples of :func:`read_samples_csv`."""
    return CostModel.fit(read_samples_csv(path))
