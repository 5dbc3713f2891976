"""Cost-model fitting from a CSV of queue-free prefill samples (n, L, seconds)."""

from __future__ import annotations

from pathlib import Path

import pytest

from smetric.core.costmodel import CostModel, fit_csv, read_samples_csv


def write(tmp_path: Path, text: str) -> Path:
    p = tmp_path / "samples.csv"
    p.write_text(text)
    return p


def test_fit_recovers_coefficients(tmp_path: Path) -> None:
    truth = CostModel(c_lin_s=1e-4, c_att_s=1.5e-8)
    rows = ["n,L,seconds,gpu"]
    for n, L in [(1000, 1000), (4000, 4000), (2000, 30000), (16000, 16000), (500, 60000)]:
        rows.append(f"{n},{L},{truth.cost(n, L)!r},h20")
    fitted = fit_csv(write(tmp_path, "\n".join(rows) + "\n"))
    assert fitted.c_lin_s == pytest.approx(truth.c_lin_s, rel=1e-6)
    assert fitted.c_att_s == pytest.approx(truth.c_att_s, rel=1e-6)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("n,L\n1,2\n", "missing column.*seconds"),
        ("n,L,seconds\n1,x,0.1\n", r"samples.csv:2: n, L and seconds must be numbers"),
        ("n,L,seconds\n5,2,0.1\n", r"samples.csv:2: need 0 <= n <= L"),
        ("n,L,seconds\n1,2,0\n", "seconds > 0"),
        ("n,L,seconds\n1,2\n", "must be numbers"),
    ],
)
def test_bad_csv_rows_are_reported(tmp_path: Path, text: str, match: str) -> None:
    with pytest.raises(ValueError, match=match):
        read_samples_csv(write(tmp_path, text))


def test_too_few_samples(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="at least two"):
        fit_csv(write(tmp_path, "n,L,seconds\n10,10,0.01\n"))
