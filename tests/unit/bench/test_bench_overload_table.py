"""smetric.bench.evidence.overload_table: rows grouped per policy, load and flow control; the
``--policies`` filter and the ``--local`` column."""

from __future__ import annotations

import gzip
import json
from pathlib import Path

import pytest

from smetric.bench.evidence import overload_table
from smetric.bench.evidence.inputs import InputError


def _row(policy: str, seed: int, tps: float, fc: bool, local: float) -> dict[str, object]:
    r: dict[str, object] = {
        "policy": policy,
        "seed": seed,
        "rate_multiplier": 8.0,
        "tps_within_slo": tps,
        "family_completion_mean_s": 900.0,
        "family_slowdown_mean": 1.5,
        "families_done_share": 0.25,
        "local_hit_ratio": local,
    }
    if fc:
        r |= {"fc_shed_share": 0.3, "fc_failed_share": 0.1}
    return r


def test_filters_policies_and_adds_the_local_share(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    off = tmp_path / "off.json"
    off.write_text(
        json.dumps(
            {
                "config": {},
                "results": [_row(p, s, 100 + s, False, 0.5) for p in ("smetric", "random") for s in (10, 11)],
            }
        )
    )
    sidecar = tmp_path / "on.runs.jsonl"
    lines = [{"format": "smetric-sim-runs/1"}] + [
        {"key": [], "row": _row("smetric", s, 90.0, True, 0.7)} for s in (10, 11)
    ]
    sidecar.write_text("".join(json.dumps(x) + "\n" for x in lines))

    assert overload_table.main(["--policies", "smetric", "--local", str(off), f"fc={sidecar}"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[0].endswith("| families done | local % |") and out[1] == "|---" * 11 + "|"
    assert out[2:] == [
        "| smetric | 8x | fc | 2 | 90 (90, 90) | 30.0 % | 10.0 % | 900 | 1.50 | 25 % | 70 |",
        "| smetric | 8x | off | 2 | 110 (110, 111) | - | - | 900 | 1.50 | 25 % | 50 |",
    ]

    assert overload_table.main([str(off)]) == 0
    plain = capsys.readouterr().out.splitlines()
    assert plain[0].endswith("| families done |") and len(plain) == 4 and any("random" in x for x in plain)


def test_reads_a_gzipped_sidecar_as_docs_data_keeps_it(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    lines = [{"format": "smetric-sim-runs/1"}] + [
        {"key": [], "row": _row("dynamo", s, 80.0 + s, True, 0.4)} for s in (10, 11)
    ]
    gz = tmp_path / "s51-cell.runs.jsonl.gz"
    gz.write_bytes(gzip.compress("".join(json.dumps(x) + "\n" for x in lines).encode()))
    assert overload_table.main([f"s51-cell={gz}"]) == 0
    out = capsys.readouterr().out.splitlines()
    assert out[2] == "| dynamo | 8x | s51-cell | 2 | 90 (90, 91) | 30.0 % | 10.0 % | 900 | 1.50 | 25 % |"

    cut = tmp_path / "cut.runs.jsonl.gz"
    cut.write_bytes(gz.read_bytes()[:-8])
    with pytest.raises(InputError, match=r"cut\.runs\.jsonl\.gz: cannot read it"):
        overload_table.main([str(cut)])
