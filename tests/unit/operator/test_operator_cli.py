"""``smetric-operator render``: YAML stream out, clear errors and exit codes for bad input."""

from __future__ import annotations

from pathlib import Path

import pytest
import yaml

from smetric.operator.cli import main

ROOT = Path(__file__).resolve().parents[3]
SAMPLE = ROOT / "manifests" / "samples" / "disaggregated-qwen3-235b.yaml"


def test_render_sample_prints_children(capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["render", str(SAMPLE)]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    names = {(d["kind"], d["metadata"]["name"]) for d in docs}
    assert ("Deployment", "qwen3-235b-pd-prefill") in names and (
        "Deployment",
        "qwen3-235b-pd-decode",
    ) in names
    assert ("InferencePool", "qwen3-235b-pd") in names and ("HTTPRoute", "qwen3-235b-pd") in names
    assert all(d["metadata"]["namespace"] == "smetric" for d in docs)


def test_render_namespace_default_and_stdin(
    capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    import io

    doc = "kind: SMetricPool\nmetadata: {name: x}\nspec: {model: {name: m}, topology: {replicas: 1}}\n"
    monkeypatch.setattr("sys.stdin", io.StringIO(doc))
    assert main(["render", "-", "--namespace", "team-b"]) == 0
    docs = list(yaml.safe_load_all(capsys.readouterr().out))
    assert {d["metadata"]["namespace"] for d in docs} == {"team-b"}


@pytest.mark.parametrize(
    ("text", "code", "message"),
    [
        (
            "kind: SMetricPool\nmetadata: {name: x}\nspec: {model: {name: m}, topology: {mode: colocated}}\n",
            1,
            "requires topology.replicas",
        ),
        ("kind: ConfigMap\nmetadata: {name: x}\n", 2, "no SMetricPool found"),
        ("kind: [unclosed\n", 2, "not YAML"),
    ],
)
def test_render_errors(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], text: str, code: int, message: str
) -> None:
    path = tmp_path / "pool.yaml"
    path.write_text(text)
    assert main(["render", str(path)]) == code
    captured = capsys.readouterr()
    assert message in captured.err and captured.out == ""
