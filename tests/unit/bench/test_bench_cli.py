"""`smetric bench` argument handling: clear errors before anything starts."""

from __future__ import annotations

from pathlib import Path

import pytest

from smetric.bench import cli
from smetric.bench.presets import QUICK_COLD
from smetric.bench.procs import BenchError
from smetric.bench.stacks import PickerFrontend, VllmRouterFrontend, frontends


def test_unknown_policy_is_rejected(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    assert cli.main(["--policies", "smetric,nope", "--json", str(tmp_path / "x.json")]) == 2
    assert "unknown policy nope" in capsys.readouterr().out


def test_missing_trace_is_a_clear_error(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    code = cli.main(
        ["--quick", "--trace", str(tmp_path / "none.jsonl.gz"), "--json", str(tmp_path / "x.json")]
    )
    assert code == 2  # before any process starts
    assert "not found" in capsys.readouterr().out


def test_malformed_trace_is_one_line_before_anything_starts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    bad = tmp_path / "bad.jsonl"
    bad.write_text('{"not": "a trace record"}\nnot json at all\n')
    code = cli.main(["--quick", "--trace", str(bad), "--json", str(tmp_path / "x.json")])
    out = capsys.readouterr().out
    assert code == 2
    assert out.startswith(f"smetric bench: trace {bad}:1:") and "Traceback" not in out, out
    assert len(out.strip().splitlines()) == 1 or len(out) < 400, out  # one line (rich may wrap it)
    assert not (tmp_path / "x.json").exists()


def test_the_printed_log_folder_is_kept(capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """The header names the log folder; it is still there after a run that went well."""
    args = cli.build_parser().parse_args(["--quick", "--json", str(tmp_path / "x.json")])
    bench = cli.Bench(args, cli.resolve(args), cli.Console(width=200), tmp_path / "t", None)  # type: ignore[arg-type]
    bench.log_dir = tmp_path / "logs"
    bench.log_dir.mkdir()
    bench.finish_logs(failed=False)
    assert bench.log_dir.is_dir()
    assert f"process logs in {bench.log_dir}" in capsys.readouterr().out


def test_quick_preset_and_overrides() -> None:
    args = cli.build_parser().parse_args(["--quick", "--instances", "2", "--json", "x"])
    preset = cli.resolve(args)
    assert preset.instances == 2 and preset.policies == cli.QUICK.policies
    with pytest.raises(BenchError, match="token-scale"):
        cli.resolve(cli.build_parser().parse_args(["--token-scale", "2", "--json", "x"]))


def test_scaled_kv_capacity_is_whole_blocks() -> None:
    args = cli.build_parser().parse_args(["--quick", "--json", "x"])
    cap = cli.scaled_kv_capacity(args, cli.resolve(args))
    assert cap % args.block_size == 0 and cap > 0


def test_rows_and_peers() -> None:
    rows = frontends(["smetric", "lmetric"], ["vllm-router"], "")
    assert [r.label for r in rows] == [
        "smetric",
        "lmetric",
        "vllm-router:cache_aware",
        "vllm-router:kv_aware",
    ]
    assert isinstance(rows[0], PickerFrontend) and isinstance(rows[-1], VllmRouterFrontend)
    with pytest.raises(BenchError, match="unknown peer"):
        frontends([], ["sglang"], "")
    assert rows[0].router == "envoy+smetric-epp"
    observed = frontends(["smetric"], [], "", "observer")
    assert observed[0].router == "envoy+smetric-epp (observer)" and observed[0].label == "smetric"
    with pytest.raises(BenchError, match="--response-path"):
        frontends(["smetric"], [], "", "sideways")


def test_picker_rows_route_through_the_pool_cluster_by_default() -> None:
    """The bench knows its pool, so Envoy's override_host pool cluster (only pool
    endpoints reachable, retries on the picker's fallbacks) is the default; ORIGINAL_DST stays
    available (--envoy-upstream original-dst)."""
    from smetric.bench.stacks import Cluster
    from smetric.epp.envoy import bootstrap

    cluster = Cluster(("", ""), ("127.0.0.1:18000", "127.0.0.1:18001"), ("", ""))
    (row,) = frontends(["smetric"], [], "")
    options = row.envoy_options(cluster, 10000, 10001, 10002)  # type: ignore[union-attr]
    assert options.pool_endpoints == cluster.endpoints
    clusters = {c["name"]: c for c in bootstrap(options)["static_resources"]["clusters"]}
    assert "pool" in clusters
    route = bootstrap(options)["static_resources"]["listeners"][0]
    assert '"cluster": "pool"' in str(route).replace("'", '"')
    assert "connect-failure" in str(route)  # the retry policy that takes the next fallback
    (orig,) = frontends(["smetric"], [], "", upstream="original-dst")
    assert orig.envoy_options(cluster, 10000, 10001, 10002).pool_endpoints == ()  # type: ignore[union-attr]
    with pytest.raises(BenchError, match="--envoy-upstream"):
        frontends(["smetric"], [], "", upstream="anywhere")
    assert cli.build_parser().parse_args(["--json", "x"]).envoy_upstream == "pool"


def test_peer_defaults_rates_and_seeds() -> None:
    parse = cli.build_parser().parse_args
    quick = cli.resolve(parse(["--quick", "--json", "x"]))
    assert quick.peers == ("vllm-router:cache_aware",) and quick.seeds == 2
    assert cli.resolve(parse(["--json", "x"])).seeds == 3
    assert cli.resolve(parse(["--quick", "--peer", "none", "--json", "x"])).peers == ()
    assert cli.parse_rates(parse(["--rates", "2,1,1", "--json", "x"])) == (1.0, 2.0)
    assert cli.parse_rates(parse(["--json", "x"])) == ()  # no rates: find the knee
    for bad in (["--rates", "1,x"], ["--rates", "-1"], ["--rates", "1", "--rate", "2"]):
        with pytest.raises(BenchError):
            cli.resolve(parse([*bad, "--json", "x"]))
    # the knee search starts at the same rate per instance for any cluster size
    assert cli.resolve(parse(["--instances", "16", "--json", "x"])).rate == pytest.approx(2 * cli.FULL.rate)


def test_families_follow_the_rate_unless_given() -> None:
    preset = QUICK_COLD  # --arrivals cold: sampled families arriving over the replay
    assert cli.families_for(560, preset, 0.05) == 240  # 0.05 families per model second x 4800 s window
    assert cli.families_for(560, cli.replace(preset, warmup_s=1200.0), 0.05) == 300  # warm-up and window
    assert cli.families_for(50, preset, 1.0) == 50  # capped by the trace
    assert cli.families_for(560, cli.replace(preset, sessions=7), 5.0) == 7


def test_an_empty_trace_is_one_line_before_anything_starts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path
) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_text("")
    code = cli.main(["--quick", "--trace", str(empty), "--json", str(tmp_path / "x.json")])
    out = capsys.readouterr().out
    assert code == 2, out
    assert out.startswith(f"smetric bench: trace {empty}: no request to replay") and "Traceback" not in out


@pytest.mark.parametrize("kind", ["under /proc", "a file"])
def test_an_unusable_log_dir_is_one_line_before_anything_starts(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch, kind: str
) -> None:
    afile = tmp_path / "afile"
    afile.write_text("")
    log_dir = Path("/proc/x/logs") if kind == "under /proc" else afile
    monkeypatch.setattr(cli, "find_trace", lambda _: pytest.fail("the trace was looked for"))
    code = cli.main(["--quick", "--log-dir", str(log_dir), "--json", str(tmp_path / "x.json")])
    out = capsys.readouterr().out
    assert code == 2, out
    assert out.startswith(f"smetric bench: --log-dir {log_dir}") and "Traceback" not in out, out


def test_the_table_is_printed_before_a_failing_write(
    capsys: pytest.CaptureFixture[str], tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """The results reach the screen even when the file cannot be written at the end."""
    args = cli.build_parser().parse_args(["--quick", "--json", str(tmp_path / "x.json")])
    bench = cli.Bench(args, cli.resolve(args), cli.Console(width=200), tmp_path / "t", None)  # type: ignore[arg-type]
    bench.meta = {"seeds": [0]}
    shown: list[str] = []
    monkeypatch.setattr(cli, "render_rows", lambda rows, console, title: shown.append(title))

    def refuse(path: Path, rows: object, meta: object) -> None:
        assert shown, "written before the table was printed"
        raise OSError(28, "No space left on device")

    monkeypatch.setattr(cli, "write_rows_json", refuse)
    with pytest.raises(BenchError, match=r"--json .*x\.json: cannot write there \(No space left on device\)"):
        bench.write([], final=True)
    assert shown
