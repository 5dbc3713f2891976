"""The differential harness over several seeds: rho of the seed means, the paired gap, the bench's spread."""

from __future__ import annotations

import gzip
from pathlib import Path

import orjson
import pytest

from smetric.bench.differential_seeds import collect, load, main, rho_of_means


def doc(seed: int, bench: dict[str, float], sim: dict[str, float], rho: float = 0.0) -> dict[str, object]:
    return {
        "seed": seed,
        "spearman": {"as is": rho},
        "policies": {
            p: {"tps_within_slo_bench": bench[p], "as is": {"tps_within_slo_sim": sim[p]}} for p in bench
        },
    }


# two seeds on which each tool orders two of three policies differently, while the means agree
DOCS = [
    doc(2, {"a": 40, "b": 30, "c": 5}, {"a": 30, "b": 40, "c": 6}, rho=0.5),
    doc(3, {"a": 20, "b": 10, "c": 3}, {"a": 28, "b": 12, "c": 2}, rho=1.0),
]


def test_the_seed_means_rank_the_policies_where_one_seed_does_not() -> None:
    rows = {r.policy: r for r in collect(DOCS)}
    assert rows["a"].mean(rows["a"].bench) == 30 and rows["a"].mean(rows["a"].sim) == 29
    assert rho_of_means(list(rows.values())) == pytest.approx(1.0)


def test_the_gap_is_paired_by_seed_and_the_spread_is_the_bench_s() -> None:
    rows = {r.policy: r for r in collect(DOCS)}
    m, ci = rows["b"].gap()  # 30 - 40 and 10 - 12
    assert m == pytest.approx(-6.0) and ci is not None and ci[0] < -6.0 < ci[1]
    assert rows["a"].inside_spread()  # 29 against 30 +- 2 x 14.1
    tight = collect([doc(2, {"x": 10}, {"x": 20}), doc(3, {"x": 11}, {"x": 21})])[0]
    assert not tight.inside_spread()  # 20.5 against 10.5 +- 2 x 0.7
    assert not collect([doc(2, {"x": 10}, {"x": 10})])[0].inside_spread()  # one seed: no spread to lie in


def test_the_command_reads_gzipped_runs(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    paths = []
    for d in DOCS:
        p = tmp_path / f"s{d['seed']}.json.gz"
        p.write_bytes(gzip.compress(orjson.dumps(d)))
        paths.append(str(p))
    assert load(paths[0])["seed"] == 2
    main(paths)
    out = capsys.readouterr().out
    assert "rho of the seed means: +1.00 (per seed: seed 2 +0.50, seed 3 +1.00)" in out
    assert "| a | 40.0 / 20.0 | 30.0 (14.1) |" in out


def test_another_simulator_view_is_compared_when_asked() -> None:
    docs = [doc(2, {"x": 10, "y": 5}, {"x": 20, "y": 4}), doc(3, {"x": 12, "y": 6}, {"x": 22, "y": 5})]
    for d, loop in zip(docs, (11.0, 12.5), strict=True):
        d["policies"]["x"]["bench's loop"] = {"tps_within_slo_sim": loop}  # type: ignore[index]
        d["policies"]["y"]["bench's loop"] = {"tps_within_slo_sim": 5.0}  # type: ignore[index]
        d["spearman"]["bench's loop"] = 1.0  # type: ignore[index]
    as_is = {r.policy: r for r in collect(docs)}
    looped = {r.policy: r for r in collect(docs, "bench's loop")}
    assert not as_is["x"].inside_spread() and looped["x"].inside_spread()


def test_a_bad_input_is_one_line(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from smetric.bench.evidence.inputs import command

    good = tmp_path / "s2.json.gz"
    good.write_bytes(gzip.compress(orjson.dumps(DOCS[0])))
    cut = tmp_path / "cut.json.gz"
    cut.write_bytes(good.read_bytes()[:20])
    other = tmp_path / "other.json"
    other.write_text('{"a": 1}\n')
    prog = "python -m smetric.bench.differential_seeds"
    for argv, says in (
        ([str(tmp_path / "none.json")], "cannot read it (No such file or directory)"),
        ([str(cut)], "cannot read it (a gzip file cut short)"),
        ([str(other)], "not a `differential_run --json` output (no 'seed', 'policies', 'spearman')"),
        ([str(good), "--view", "loop"], "seed 2, a: no simulator view 'loop'"),
    ):
        assert command(main, argv, prog) == 2
        err = capsys.readouterr().err
        assert err.count("\n") == 1 and "Traceback" not in err, err
        assert err.startswith(f"{prog}: ") and says in err, err
