"""``images/build.sh`` builds and tags every image, and every image the project names is one of its
tags or a pinned upstream image.

No Docker here: ``--dry-run`` prints the exact ``docker build`` / ``docker push`` commands, and the
tests read the tags from them. The references checked: every ``image`` in ``manifests/`` (samples,
operator, sim-dask), the chart's default image, the operator's default image constants (and so
the CRD defaults, generated from them), the image names in docs/deploy.md and docs/operator.md,
and what the kind script builds.
"""

from __future__ import annotations

import re
import shlex
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from smetric.operator.spec import EPP_IMAGE, MOONCAKE_IMAGE, VLLM_IMAGE
from tests.support.scripts import ROOT

SCRIPT = ROOT / "images" / "build.sh"
# Names this project builds; anything else is an upstream image and must be pinned.
OWN_PREFIXES = ("ghcr.io/smetric/", "smetric/", "registry.example.com/smetric/")
GUIDE_REG = "registry.example.com/smetric"  # docs/deploy.md's REG=


def dry_run(*args: str, root: Path = ROOT) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        ["bash", str(root / "images" / "build.sh"), "--dry-run", *args],
        capture_output=True,
        text=True,
        timeout=30,
        check=False,
    )


def built(*args: str, root: Path = ROOT) -> dict[str, str]:
    """stem -> tag, from the ``docker build`` commands the dry run prints (checked against its
    closing ``image STEM TAG`` lines)."""
    result = dry_run(*args, root=root)
    assert result.returncode == 0, result.stderr
    tags: dict[str, str] = {}
    listed: dict[str, str] = {}
    for line in result.stdout.splitlines():
        argv = shlex.split(line)
        if argv[:2] == ["docker", "build"]:
            dockerfile = argv[argv.index("-f") + 1]
            stem = re.fullmatch(r"images/([\w-]+)\.Dockerfile", dockerfile)
            assert stem and argv[-1] == ".", line
            tags[stem.group(1)] = argv[argv.index("-t") + 1]
        elif argv[:1] == ["image"]:
            listed[argv[1]] = argv[2]
    assert tags == listed
    return tags


def test_every_dockerfile_is_built_and_tagged() -> None:
    stems = {p.name.removesuffix(".Dockerfile") for p in (ROOT / "images").glob("*.Dockerfile")}
    assert set(built()) == stems


def test_the_dry_run_prints_the_exact_commands() -> None:
    result = dry_run(
        "--registry", "registry.example.com/team", "--version", "1.2.3", "--push", "epp", "mooncake"
    )
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [
        "docker build -f images/epp.Dockerfile -t registry.example.com/team/smetric-epp:1.2.3 .",
        "docker push registry.example.com/team/smetric-epp:1.2.3",
        "docker build -f images/mooncake.Dockerfile -t registry.example.com/team/mooncake-master:0.3.13.post1-cuda13 .",
        "docker push registry.example.com/team/mooncake-master:0.3.13.post1-cuda13",
        "image epp registry.example.com/team/smetric-epp:1.2.3",
        "image mooncake registry.example.com/team/mooncake-master:0.3.13.post1-cuda13",
    ]


def test_the_defaults_are_the_registry_and_pyproject_version() -> None:
    version = re.search(r'^version = "(.+)"$', (ROOT / "pyproject.toml").read_text(), flags=re.M)
    assert version
    assert built("operator") == {"operator": f"ghcr.io/smetric/smetric-operator:{version.group(1)}"}


@pytest.fixture
def repo_copy(tmp_path: Path) -> Path:
    shutil.copytree(ROOT / "images", tmp_path / "images")
    shutil.copy(ROOT / "pyproject.toml", tmp_path / "pyproject.toml")
    return tmp_path


def test_pinned_tags_follow_the_dockerfiles(repo_copy: Path) -> None:
    """The Mooncake tags name the wheel's version and CUDA flavour as the Dockerfile installs them."""
    for stem in ("mooncake", "engine-lmcache"):
        path = repo_copy / "images" / f"{stem}.Dockerfile"
        text = path.read_text()
        text = text.replace("ARG MOONCAKE_VERSION=0.3.13.post1", "ARG MOONCAKE_VERSION=0.3.14")
        path.write_text(text.replace("mooncake-transfer-engine-cuda13", "mooncake-transfer-engine-cuda12"))
    assert built("mooncake", "engine-lmcache", root=repo_copy) == {
        "mooncake": "ghcr.io/smetric/mooncake-master:0.3.14-cuda12",
        "engine-lmcache": "ghcr.io/smetric/vllm-lmcache:v0.32.0-lmcache0.5.6-mooncake0.3.14-cuda12",
    }


def test_a_dockerfile_without_its_pinned_arg_is_refused(repo_copy: Path) -> None:
    path = repo_copy / "images" / "engine-lmcache.Dockerfile"
    path.write_text(re.sub(r"^ARG LMCACHE_VERSION=.*$", "", path.read_text(), flags=re.M))
    result = dry_run(root=repo_copy)
    assert result.returncode == 2
    assert "images/engine-lmcache.Dockerfile has no 'ARG LMCACHE_VERSION=' default" in result.stderr
    assert "docker build" not in result.stdout  # nothing half-printed


@pytest.mark.parametrize(
    ("args", "message"),
    [
        (["--registry", "Registry.Example.com/X"], "is not an image name prefix"),
        (["--version", "-rc1"], "is not a valid tag"),
        (["--version", "a/b"], "is not a valid tag"),
        (["nginx"], "unknown image 'nginx'"),
        (["--platform", "arm64"], "unknown option --platform"),
        (["--registry"], "--registry needs a value"),
    ],
)
def test_bad_input_is_refused_with_a_reason(args: list[str], message: str) -> None:
    result = dry_run(*args)
    assert result.returncode == 2 and message in result.stderr, result.stderr
    assert result.stdout == ""


def _images(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        for key, value in node.items():
            if key == "image" and isinstance(value, str):
                yield value
            else:
                yield from _images(value)
    elif isinstance(node, list):
        for item in node:
            yield from _images(item)


def references() -> dict[str, str]:
    """Every image reference the project names -> where."""
    refs: dict[str, str] = {}
    for path in sorted((ROOT / "manifests").rglob("*.yaml")):
        for doc in yaml.safe_load_all(path.read_text()):
            for ref in _images(doc):
                refs[ref] = str(path.relative_to(ROOT))
    chart = ROOT / "charts" / "smetric-operator"
    values = yaml.safe_load((chart / "values.yaml").read_text())["image"]
    app_version = yaml.safe_load((chart / "Chart.yaml").read_text())["appVersion"]
    refs[f"{values['repository']}:{values['tag'] or app_version}"] = "chart default"
    for name, ref in (
        ("EPP_IMAGE", EPP_IMAGE),
        ("MOONCAKE_IMAGE", MOONCAKE_IMAGE),
        ("VLLM_IMAGE", VLLM_IMAGE),
    ):
        refs[ref] = f"spec.{name}"
    pattern = re.compile(r"(?<![\w./$-])((?:ghcr\.io/smetric|smetric|\$REG)/[a-z0-9-]+:[\w.-]*\w)")
    for doc in ("deploy.md", "operator.md"):
        for ref in pattern.findall((ROOT / "docs" / doc).read_text()):
            refs[ref.replace("$REG", GUIDE_REG)] = f"docs/{doc}"
    script = (ROOT / "tests" / "e2e" / "kind_e2e.sh").read_text()
    (names,) = re.findall(r"for image in ([\w ]+); do", script)
    (tag,) = re.findall(r"^TAG=(\w+)$", script, flags=re.M)
    for name in names.split():
        refs[f"smetric/smetric-{name}:{tag}"] = "tests/e2e/kind_e2e.sh"
    return refs


def test_every_image_named_is_built_by_the_script_or_pinned_upstream() -> None:
    refs = references()
    assert {EPP_IMAGE, MOONCAKE_IMAGE, "smetric/smetric-epp:dev"} <= set(refs)
    produced: dict[tuple[str, str], set[str]] = {}
    wrong = []
    for ref, where in sorted(refs.items()):
        name, _, tag = ref.rpartition(":")
        if not ref.startswith(OWN_PREFIXES):
            if not tag or tag == "latest" or "/" in tag:
                wrong.append(f"{ref} ({where}): an upstream image without a pinned tag")
            continue
        prefix = name.rpartition("/")[0]
        if (prefix, tag) not in produced:
            produced[prefix, tag] = set(built("--registry", prefix, "--version", tag).values())
        if ref not in produced[prefix, tag]:
            wrong.append(f"{ref} ({where}): not a tag images/build.sh makes")
    assert not wrong, "\n".join(wrong)
