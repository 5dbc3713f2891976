"""docs/deploy.md as written: every step that runs without a cluster is run here (the chart with
the guide's values, the kustomization, the images the kind sample names), and the order of the
others is checked (namespace before use, ``pip install`` before ``smetric-operator render``)."""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml

from tests.unit.project.test_images_build import built as build_script_tags

ROOT = Path(__file__).resolve().parents[3]
GUIDE = ROOT / "docs" / "deploy.md"
K8S_VERSION = "1.33.0"


def _commands() -> list[str]:
    """The guide's shell commands in order: ``sh`` blocks, continuation lines joined, comments cut."""
    text = GUIDE.read_text()
    out: list[str] = []
    for block in re.findall(r"```sh\n(.*?)```", text, flags=re.S):
        joined = block.replace("\\\n", " ")
        for line in joined.splitlines():
            command = line.split(" #", 1)[0].strip()
            if command and not command.startswith("#"):
                out.append(command)
    return out


def _first(commands: list[str], pattern: str) -> int:
    for i, command in enumerate(commands):
        if re.search(pattern, command):
            return i
    raise AssertionError(f"no command matches {pattern!r}")


def _docs(path: Path) -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all(path.read_text()) if d]


def test_the_pools_namespace_exists_before_anything_uses_it() -> None:
    commands = _commands()
    created = _first(commands, r"kubectl create namespace smetric(?![\w-])")
    for i, command in enumerate(commands):
        uses = re.search(r"(-n|--namespace) smetric(?![\w-])", command) or "manifests/samples/" in command
        if uses and "smetric-operator render" not in command:
            assert i > created, command
    # the watchNamespaces Role is created by the chart install: after the namespace
    assert _first(commands, r"^helm install smetric ") > created
    samples = [_docs(p)[0] for p in sorted((ROOT / "manifests" / "samples").glob("*.yaml"))]
    assert {s["metadata"]["namespace"] for s in samples} == {"smetric"}


def test_kind_script_creates_the_namespace_before_the_operator() -> None:
    script = (ROOT / "tests" / "e2e" / "kind_e2e.sh").read_text()
    # and builds and loads the images the kind sample names
    (tag,) = re.findall(r"^TAG=(\S+)$", script, flags=re.M)
    (names,) = re.findall(r"for image in ([\w ]+); do", script)
    assert 'kind load docker-image --name "$CLUSTER" "smetric/smetric-$image:$TAG"' in script
    built = {f"smetric/smetric-{name}:{tag}" for name in names.split()}
    (pool,) = _docs(ROOT / "manifests" / "samples" / "kind-emulator.yaml")
    assert {pool["spec"]["model"]["image"], pool["spec"]["router"]["image"]} <= built
    assert script.index("create namespace smetric") < script.index("helm upgrade --install smetric")
    assert script.index("create namespace smetric") < script.index("manifests/samples/gateway.yaml")


def test_pip_install_comes_before_smetric_operator_render() -> None:
    commands = _commands()
    assert _first(commands, r"pip install \.") < _first(commands, r"smetric-operator render")


def test_step_0_render_runs_as_written() -> None:
    """``smetric-operator render manifests/samples/kind-emulator.yaml`` from the installed console
    script, in the repository root: every object of the pool, nothing on stderr."""
    script = shutil.which("smetric-operator")
    if script is None:
        pytest.skip("smetric-operator is not installed (python -m pip install .)")
    command = commands_matching(r"^smetric-operator render manifests/samples/kind-emulator.yaml")[0]
    argv = shlex.split(command.split("|", 1)[0])
    result = subprocess.run([script, *argv[1:]], cwd=ROOT, capture_output=True, text=True, timeout=120)
    assert result.returncode == 0 and result.stderr == "", result.stderr
    kinds = {d["kind"] for d in yaml.safe_load_all(result.stdout) if d}
    assert {"Deployment", "InferencePool", "HTTPRoute", "Service", "ConfigMap"} <= kinds


def commands_matching(pattern: str) -> list[str]:
    found = [c for c in _commands() if re.search(pattern, c)]
    assert found, pattern
    return found


def test_the_kind_path_builds_the_images_the_kind_sample_names() -> None:
    commands = _commands()
    built = set()
    for command in commands:
        if command.startswith("docker build "):
            argv = shlex.split(command)
            built.add(argv[argv.index("-t") + 1])
        elif command.startswith("images/build.sh "):  # its dry run prints the docker builds it runs
            built |= set(build_script_tags(*shlex.split(_with_reg(command))[1:]).values())
    (pool,) = _docs(ROOT / "manifests" / "samples" / "kind-emulator.yaml")
    named = {pool["spec"]["model"]["image"], pool["spec"]["router"]["image"]}
    assert named <= built, named - built
    loaded = set(shlex.split(commands[_first(commands, r"^kind load docker-image ")])[5:])
    assert named | {"smetric/smetric-operator:dev"} <= loaded
    for command in commands:
        if command.startswith("docker build "):
            dockerfile = shlex.split(command)[shlex.split(command).index("-f") + 1]
            assert (ROOT / dockerfile).is_file(), dockerfile


def _with_reg(command: str) -> str:
    """``$REG`` as the guide sets it."""
    (reg,) = (c.partition("=")[2] for c in _commands() if c.startswith("REG="))
    return command.replace("$REG", reg)


def test_the_gpu_path_builds_and_pushes_what_the_pool_fields_name() -> None:
    """The GPU build pushes every image the guide then points the pool at."""
    (command,) = (c for c in commands_matching(r"^images/build\.sh .*--push") if "$REG" in c)
    tags = set(build_script_tags(*shlex.split(_with_reg(command))[1:]).values())
    reg = _with_reg("$REG")
    pointed = re.findall(r"`[\w.]+: (\$REG/[^`]+)`", GUIDE.read_text().replace("\n", " "))
    assert len(pointed) == 3 and {p.replace("$REG", reg) for p in pointed} <= tags, (pointed, tags)


def test_no_step_needs_a_tool_the_picker_image_lacks() -> None:
    """The picker image is python:3.11-slim (no procps): ``kubectl exec`` runs python only, and
    SIGUSR1 reaches the picker because it is PID 1 (exec-form ENTRYPOINT)."""
    dockerfile = (ROOT / "images" / "epp.Dockerfile").read_text()
    assert re.findall(r"^FROM (\S+)", dockerfile, flags=re.M)[-1] == "python:3.11-slim"
    assert re.search(r'^ENTRYPOINT \["smetric-epp"\]', dockerfile, flags=re.M)
    for command in _commands():
        if command.startswith("kubectl") and " exec " in command:
            program = shlex.split(command.split(" -- ", 1)[1])
            assert program[0] == "python", command
            if "SIGUSR1" in command:
                assert program[2] == "import os, signal; os.kill(1, signal.SIGUSR1)"
    assert "kill -USR1" not in GUIDE.read_text()


def _helm_values(command: str) -> dict[str, Any]:
    """``--set a.b=c`` pairs of a helm command as nested values ($VARS replaced by a placeholder)."""
    values: dict[str, Any] = {}
    argv = shlex.split(command)
    for i, arg in enumerate(argv):
        if arg == "--set":
            key, _, raw = argv[i + 1].partition("=")
            node = values
            *parents, leaf = key.split(".")
            for part in parents:
                node = node.setdefault(part, {})
            if raw.startswith("{") and raw.endswith("}"):
                node[leaf] = [v for v in raw[1:-1].split(",") if v]
            else:
                node[leaf] = re.sub(r"\$\w+", "registry.example.com/smetric", raw)
    return values


def test_the_guides_chart_install_renders_with_its_values() -> None:
    helm = pytest.importorskip("helm_python.chart", reason="helm-python-sdk ([test] extra) renders the chart")
    text = GUIDE.read_text()
    (install,) = [c for c in _commands() if c.startswith("helm install smetric ")]
    variants = [_helm_values(install)]
    for comment in re.findall(r"^# (?:kind|only some namespaces): (--set .*?)(?: \(|$)", text, flags=re.M):
        variants.append(_helm_values(f"helm {comment}"))
    assert len(variants) == 3, variants  # default, kind, watchNamespaces
    chart = helm.Chart.load(ROOT / "charts" / "smetric-operator")
    for values in variants:
        chart.validate_schema(values)
        out = chart.render(values, name="smetric", namespace="smetric-system", is_install=True)
        docs = [d for name, t in out.items() if not name.endswith(".txt") for d in yaml.safe_load_all(t) if d]
        for doc in docs:
            kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
        (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
        assert deployment["metadata"]["name"] in text  # the rollout status line names it
        image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
        if "image" in values:
            assert image == f"{values['image']['repository']}:{values['image']['tag']}"
        if "watchNamespaces" in values:
            roles = [d for d in docs if d["kind"] == "Role"]
            assert {r["metadata"]["namespace"] for r in roles} == {"smetric"}


def kustomize_build(folder: Path) -> list[dict[str, Any]]:
    """``kubectl kustomize`` for what this repository's kustomizations use (``resources``: files or
    folders with their own kustomization; ``images``: name -> newName/newTag); anything else is
    refused so the build here cannot silently differ from kustomize's."""
    kustomization = yaml.safe_load((folder / "kustomization.yaml").read_text())
    unknown = set(kustomization) - {"apiVersion", "kind", "resources", "images"}
    assert not unknown, f"{folder}: kustomize fields this build does not do: {sorted(unknown)}"
    docs: list[dict[str, Any]] = []
    for resource in kustomization.get("resources", []):
        path = (folder / resource).resolve()
        docs += kustomize_build(path) if path.is_dir() else _docs(path)
    for image in kustomization.get("images", []):
        for doc in docs:
            pod = doc.get("spec", {}).get("template", {}).get("spec", {})
            for c in pod.get("containers", []) + pod.get("initContainers", []):
                name, _, tag = c["image"].partition(":")
                if name == image["name"]:
                    c["image"] = f"{image.get('newName', name)}:{image.get('newTag', tag)}"
    return docs


def test_the_kustomize_path_builds_and_validates() -> None:
    assert "kubectl apply -k manifests/" in GUIDE.read_text()
    docs = kustomize_build(ROOT / "manifests")
    assert sorted(d["kind"] for d in docs) == sorted(
        [
            "CustomResourceDefinition",
            "Namespace",
            "ServiceAccount",
            "ClusterRole",
            "ClusterRoleBinding",
            "Deployment",
        ]
    )
    for doc in docs:
        kubernetes_validate.validate(doc, K8S_VERSION, strict=True)
    (namespace,) = [d for d in docs if d["kind"] == "Namespace"]
    assert {
        d["metadata"].get("namespace") for d in docs if d["kind"] in ("Deployment", "ServiceAccount")
    } == {namespace["metadata"]["name"]}
    (deployment,) = [d for d in docs if d["kind"] == "Deployment"]
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert f"name: {image.split(':')[0]}" in GUIDE.read_text()  # the guide's images: override names it


def test_kustomize_images_override_as_the_guide_shows(tmp_path: Path) -> None:
    (snippet,) = re.findall(r"```yaml\n(images:.*?)```", GUIDE.read_text(), flags=re.S)
    images = yaml.safe_load(snippet)["images"]
    overlay = tmp_path / "overlay"
    overlay.mkdir()
    kustomization = {"resources": [str(ROOT / "manifests")], "images": images}
    (overlay / "kustomization.yaml").write_text(yaml.safe_dump(kustomization))
    (deployment,) = [d for d in kustomize_build(overlay) if d["kind"] == "Deployment"]
    image = deployment["spec"]["template"]["spec"]["containers"][0]["image"]
    assert image == "registry.example.com/smetric/smetric-operator:0.1.0"


def test_the_crd_is_upgraded_before_the_release() -> None:
    """Helm never upgrades a chart's ``crds/``: the guide applies them server-side, then upgrades the
    release; the path it applies holds exactly the CRDs the chart ships (and the install copy)."""
    commands = _commands()
    apply = _first(commands, r"^kubectl apply --server-side -f charts/smetric-operator/crds/?$")
    assert apply < _first(commands, r"^helm upgrade smetric charts/smetric-operator ")
    path = ROOT / shlex.split(commands[apply])[-1]
    crds = sorted(path.glob("*.yaml"))
    assert [d["kind"] for p in crds for d in _docs(p)] == ["CustomResourceDefinition"]
    assert [p.read_text() for p in crds] == [(ROOT / "crds" / p.name).read_text() for p in crds]


def test_the_charts_kube_version_is_the_oldest_the_guide_supports() -> None:
    chart = yaml.safe_load((ROOT / "charts" / "smetric-operator" / "Chart.yaml").read_text())
    floor = re.fullmatch(r">=\s*(\d+)\.(\d+)\.0-0", chart["kubeVersion"])
    assert floor, chart.get("kubeVersion")
    row = re.search(r"^\| Kubernetes \| (\d+)\.(\d+) – ", GUIDE.read_text(), flags=re.M)
    assert row and row.groups() == floor.groups()
    from tests.unit.operator.test_operator_deploy import K8S_VERSIONS

    assert min(tuple(int(x) for x in v.split(".")[:2]) for v in K8S_VERSIONS) == tuple(
        map(int, floor.groups())
    )
