"""The bench's measuring tools (``python -m smetric.bench.<tool>``) check ``--json`` (and their other
inputs) before any work: an unwritable path is one line on stderr and exit status 2, not a
traceback after minutes of runs."""

from __future__ import annotations

import importlib
from pathlib import Path

import pytest

# module -> the function whose call is the work (it must not be reached), extra argv
TOOLS = {
    "smetric.bench.mutation.run": ("load_equivalent", ["policy.smetric"]),
    "smetric.bench.replicas": ("measure", []),
    "smetric.bench.simspeed.simulator": ("prepared", []),
    "smetric.bench.simspeed.cluster": ("run", []),
}


@pytest.mark.parametrize("name", sorted(TOOLS))
def test_an_unwritable_json_is_one_line_before_any_work(
    name: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    mod = importlib.import_module(name)
    work, extra = TOOLS[name]
    monkeypatch.setattr(mod, work, lambda *a, **k: pytest.fail(f"{work} ran"))
    trace = tmp_path / "t.jsonl"
    trace.write_text("")
    argv = ["--json", "/proc/x/y.json", *extra]
    if name.startswith("smetric.bench.simspeed"):
        argv += ["--trace", str(trace)]
    main = getattr(mod, "cli", None) if name.endswith("cluster") else mod.main
    assert main is not None
    assert main(argv) == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and "--json /proc/x/y.json: cannot write there" in err, err


def test_mutation_run_checks_its_only_file(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    from smetric.bench.mutation import run

    assert run.main(["--only", str(tmp_path / "none.txt"), "policy.smetric"]) == 2
    assert capsys.readouterr().err == (
        f"python -m smetric.bench.mutation.run: --only {tmp_path / 'none.txt'}: cannot read it (No such file or directory)\n"
    )
