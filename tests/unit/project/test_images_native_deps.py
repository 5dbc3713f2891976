"""Every shared object an image loads finds its native libraries, checked without Docker.

``images/check_native_deps.py`` resolves the ELF ``DT_NEEDED`` entries recorded in
``images/native-needed.json`` (``generate``: ``readelf -d`` of the pinned wheels) against what each
Dockerfile's final stage provides: its base image, its apt packages (``images/native-deps.toml``) and
the wheel's own libraries. No download here: the manifest is committed.
"""

from __future__ import annotations

import json
import tomllib
from types import ModuleType
from typing import Any

import pytest

from tests.support.scripts import ROOT, load_script

IMAGES = ROOT / "images"

# The two Dockerfiles as they were before the native-library check (both fail to load).
OLD_MOONCAKE = """\
FROM python:3.11-slim
ARG MOONCAKE_VERSION=0.3.13.post1
RUN pip install --no-cache-dir "mooncake-transfer-engine==${MOONCAKE_VERSION}" \\
 && useradd --uid 65532 --no-create-home --shell /usr/sbin/nologin mooncake
ENTRYPOINT ["mooncake_master"]
"""
OLD_ENGINE = """\
ARG VLLM_IMAGE=vllm/vllm-openai:v0.32.0
FROM ${VLLM_IMAGE}
ARG LMCACHE_VERSION=0.5.6
ARG MOONCAKE_VERSION=0.3.13.post1
RUN pip install --no-cache-dir "lmcache==${LMCACHE_VERSION}" "mooncake-transfer-engine==${MOONCAKE_VERSION}"
"""


@pytest.fixture(scope="module")
def checker() -> ModuleType:
    return load_script(IMAGES / "check_native_deps.py", "check_native_deps")


def _declared() -> dict[str, Any]:
    with (IMAGES / "native-deps.toml").open("rb") as fh:
        return tomllib.load(fh)


def _missing(checker: ModuleType, image: str, text: str) -> tuple[set[tuple[str, str]], list[str]]:
    manifest = json.loads((IMAGES / "native-needed.json").read_text())
    missing, problems = checker.check_image(image, checker.parse_dockerfile(text), _declared(), manifest)
    return {(m.file, m.library) for m in missing}, problems


def test_every_image_resolves_its_native_libraries(checker: ModuleType) -> None:
    assert checker.check() == []
    assert checker.main(["check"]) == 0


def test_the_old_mooncake_master_image_lacks_libibverbs(checker: ModuleType) -> None:
    """python:3.11-slim plus the wheel: mooncake_master fails with "error while loading shared
    libraries: libibverbs.so.1"."""
    missing, problems = _missing(checker, "mooncake.Dockerfile", OLD_MOONCAKE)
    assert problems == []
    assert ("mooncake/mooncake_master", "libibverbs.so.1") in missing
    assert {lib for _, lib in missing} == {"libibverbs.so.1", "libnuma.so.1", "libcurl.so.4"}


def test_the_old_engine_image_pins_a_cuda_12_mooncake(checker: ModuleType) -> None:
    """mooncake-transfer-engine 0.3.13.post1 is built for CUDA 12; vLLM 0.32's torch 2.13 is CUDA 13."""
    missing, problems = _missing(checker, "engine-lmcache.Dockerfile", OLD_ENGINE)
    assert problems == []
    assert {("mooncake/engine.so", "libcudart.so.12"), ("mooncake/store.so", "libcudart.so.12")} <= missing
    assert ("mooncake/engine.so", "libibverbs.so.1") in missing


def test_the_engine_image_is_one_cuda_major(checker: ModuleType) -> None:
    """Every CUDA runtime the engine's wheels need is the one the base's torch brings."""
    manifest = json.loads((IMAGES / "native-needed.json").read_text())
    pins = checker.parse_dockerfile((IMAGES / "engine-lmcache.Dockerfile").read_text()).pins
    cudart = {
        lib
        for name, version in pins.items()
        for entry in manifest["wheels"].get(f"{name}=={version}", {"files": {}})["files"].values()
        for lib in entry["needed"]
        if lib.startswith("libcudart.so")
    }
    assert cudart == {"libcudart.so.13"}


def test_the_manifest_records_exactly_the_declared_wheels(checker: ModuleType) -> None:
    manifest = json.loads((IMAGES / "native-needed.json").read_text())
    declared = _declared()["wheel"]
    want = {
        f"{checker.canonical(name)}=={version}"
        for name, _, version in (w["requirement"].partition("==") for w in declared)
    }
    assert set(manifest["wheels"]) == want
    assert all(wheel["files"] for wheel in manifest["wheels"].values())


def test_a_gap_in_the_declarations_fails_instead_of_passing_unexamined(checker: ModuleType) -> None:
    text = (IMAGES / "mooncake.Dockerfile").read_text()
    _, problems = _missing(checker, "mooncake.Dockerfile", text.replace("libnuma1", "libnuma1 libfoo9"))
    assert any("apt package 'libfoo9' is not declared" in p for p in problems)
    _, problems = _missing(
        checker, "mooncake.Dockerfile", text.replace("python:3.12-slim-trixie", "alpine:3")
    )
    assert any("base image 'alpine:3' is not declared" in p for p in problems)
    _, problems = _missing(
        checker,
        "mooncake.Dockerfile",
        text.replace("ARG MOONCAKE_VERSION=0.3.13.post1", "ARG MOONCAKE_VERSION=0.3.14"),
    )
    assert any("mooncake-transfer-engine-cuda13==0.3.14 is pinned but not recorded" in p for p in problems)


def test_dockerfile_parsing(checker: ModuleType) -> None:
    parsed = checker.parse_dockerfile(
        "ARG BASE=debian:13\nFROM golang AS build\nRUN apt-get install -y gcc\n"
        "FROM ${BASE}\nARG V=1.2\nRUN apt-get update && apt-get install -y --no-install-recommends \\\n"
        '    libnuma1 \\\n    libcurl4t64 && pip install --no-cache-dir "Foo_Bar==${V}" baz\n'
    )
    assert parsed.base == "debian:13"
    assert parsed.apt == ("libnuma1", "libcurl4t64")  # the final stage only; flags dropped
    assert dict(parsed.pins) == {"foo-bar": "1.2"}


def test_every_dockerfile_that_installs_a_native_wheel_is_checked() -> None:
    checked = set(_declared()["image"])
    for path in IMAGES.glob("*.Dockerfile"):
        if "mooncake" in path.read_text() or "lmcache" in path.read_text():
            assert path.name in checked, path.name
