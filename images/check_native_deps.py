"""Check, without Docker, that every shared object an image loads finds its native libraries.

Each image's Dockerfile names a base image, apt packages and pip wheels. A wheel's shared objects
name the libraries they need (ELF ``DT_NEEDED``); a missing one makes ``import`` or the binary fail
at load time ("error while loading shared libraries: libibverbs.so.1"). This script resolves them:

* ``generate``: ``pip download`` the wheels listed in ``images/native-deps.toml`` (``[[wheel]]``),
  read the ``DT_NEEDED`` and ``SONAME`` of every ELF file in them (``readelf -d``, binutils) and
  write ``images/native-needed.json``. Run it after changing a pinned wheel (downloads ~100 MB per
  Mooncake wheel; needs network access to PyPI).
* ``check`` (the default): for each ``images/*.Dockerfile`` with an ``[image."<file>".load]``
  table, take the final stage's base image, its ``apt-get install`` packages and its
  ``pip install name==version`` pins (``ARG`` defaults substituted), and report every needed
  library of the files the image loads that neither the base (``[base]``, its GPU runtime), an apt
  package (``[apt]``) nor the wheel itself provides. Reads only committed files: the unit test
  ``tests/unit/project/test_images_native_deps.py`` runs it.

Usage: python images/check_native_deps.py [check|generate]
"""

from __future__ import annotations

import fnmatch
import json
import re
import subprocess
import sys
import tempfile
import tomllib
import zipfile
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

IMAGES = Path(__file__).resolve().parent
DECLARED = IMAGES / "native-deps.toml"
MANIFEST = IMAGES / "native-needed.json"
ELF_MAGIC = b"\x7fELF"
DOWNLOAD_TIMEOUT_S = 900
READELF_TIMEOUT_S = 60


def canonical(name: str) -> str:
    """PEP 503 name normalisation (``Foo_Bar.baz`` -> ``foo-bar-baz``)."""
    return re.sub(r"[-_.]+", "-", name).lower()


@dataclass(frozen=True, slots=True)
class Dockerfile:
    """What the final stage of a Dockerfile installs."""

    base: str
    apt: tuple[str, ...]
    pins: Mapping[str, str]  # canonical distribution name -> version


def _logical_lines(text: str) -> list[str]:
    joined = re.sub(r"\\\n", " ", text)
    return [
        line.strip() for line in joined.splitlines() if line.strip() and not line.lstrip().startswith("#")
    ]


def parse_dockerfile(text: str) -> Dockerfile:
    """Base, apt packages and pip pins of the final stage (``ARG`` defaults substituted)."""
    args: dict[str, str] = {}
    base = ""
    apt: list[str] = []
    pins: dict[str, str] = {}

    def expand(value: str) -> str:
        return re.sub(r"\$\{(\w+)\}|\$(\w+)", lambda m: args.get(m.group(1) or m.group(2), m.group(0)), value)

    for line in _logical_lines(text):
        word, _, rest = line.partition(" ")
        word = word.upper()
        if word == "ARG" and "=" in rest:
            key, _, default = rest.strip().partition("=")
            args[key] = default.strip().strip('"')
        elif word == "FROM":
            base = expand(rest.split()[0])
            apt, pins = [], {}  # a new stage: only the final one is the image
        elif word == "RUN":
            for command in re.split(r"&&|;", expand(rest)):
                tokens = [t.strip("\"'") for t in command.split()]
                if tokens[:2] == ["apt-get", "install"]:
                    apt += [t for t in tokens[2:] if not t.startswith("-")]
                if "pip" in tokens and "install" in tokens:
                    for token in tokens[tokens.index("install") + 1 :]:
                        name, sep, version = token.partition("==")
                        if sep and not token.startswith("-"):
                            pins[canonical(name)] = version
    return Dockerfile(base, tuple(apt), pins)


@dataclass(frozen=True, slots=True)
class Missing:
    image: str
    distribution: str
    version: str
    file: str
    library: str

    def __str__(self) -> str:
        return (
            f"{self.image}: {self.distribution}=={self.version} {self.file} needs {self.library}, which "
            "neither its base image, its apt packages nor the wheel provides"
        )


def _declared() -> dict[str, Any]:
    with DECLARED.open("rb") as fh:
        return tomllib.load(fh)


def _manifest() -> dict[str, Any]:
    return dict(json.loads(MANIFEST.read_text(encoding="utf-8")))


def check_image(
    image: str,
    dockerfile: Dockerfile,
    declared: Mapping[str, Any],
    manifest: Mapping[str, Any],
) -> tuple[list[Missing], list[str]]:
    """``(missing libraries, problems)`` for one image. A problem is a gap in the declarations
    themselves (an unknown base or apt package, a pinned wheel not recorded): it fails the check
    too, so nothing passes unexamined."""
    problems: list[str] = []
    base = declared["base"].get(dockerfile.base)
    if base is None:
        problems.append(f"{image}: base image {dockerfile.base!r} is not declared in {DECLARED.name} [base]")
        base = {}
    provided = set(base.get("sonames", ())) | set(base.get("gpu_runtime", ()))
    for package in dockerfile.apt:
        if package not in declared["apt"]:
            problems.append(f"{image}: apt package {package!r} is not declared in {DECLARED.name} [apt]")
            continue
        provided |= set(declared["apt"][package])
    loads: Mapping[str, list[str]] = declared["image"].get(image, {}).get("load", {})
    missing: list[Missing] = []
    for distribution, version in sorted(dockerfile.pins.items()):
        patterns = loads.get(distribution)
        if patterns is None:
            continue  # a pure-Python wheel, or one whose objects this image never loads
        key = f"{distribution}=={version}"
        wheel = manifest.get("wheels", {}).get(key)
        if wheel is None:
            problems.append(
                f"{image}: {key} is pinned but not recorded in {MANIFEST.name} "
                "(add it to [[wheel]] and run `python images/check_native_deps.py generate`)"
            )
            continue
        own = {Path(f).name for f in wheel["files"]} | {
            s for entry in wheel["files"].values() if (s := entry.get("soname"))
        }
        matched = [f for f in wheel["files"] if any(fnmatch.fnmatch(f, p) for p in patterns)]
        if not matched:
            problems.append(f"{image}: {key} has no file matching {patterns}")
        for file in matched:
            for library in wheel["files"][file]["needed"]:
                if library not in provided and library not in own:
                    missing.append(Missing(image, distribution, version, file, library))
    return missing, problems


def check(images_dir: Path = IMAGES) -> list[str]:
    """Every missing library and declaration gap of the images that declare what they load."""
    declared, manifest = _declared(), _manifest()
    out: list[str] = []
    for image in sorted(declared["image"]):
        text = (images_dir / image).read_text(encoding="utf-8")
        missing, problems = check_image(image, parse_dockerfile(text), declared, manifest)
        out += problems + [str(m) for m in missing]
    return out


def read_dynamic(path: Path) -> dict[str, Any]:
    """``{"needed": [...], "soname": str | None}`` from ``readelf -d``."""
    proc = subprocess.run(
        ["readelf", "-d", "-W", str(path)],
        capture_output=True,
        text=True,
        timeout=READELF_TIMEOUT_S,
        check=True,
    )
    needed = re.findall(r"\(NEEDED\)\s+Shared library: \[([^\]]+)\]", proc.stdout)
    soname = re.search(r"\(SONAME\)\s+Library soname: \[([^\]]+)\]", proc.stdout)
    return {"needed": needed, "soname": soname.group(1) if soname else None}


def elf_members(wheel: Path, into: Path) -> Iterable[tuple[str, Path]]:
    with zipfile.ZipFile(wheel) as archive:
        for info in archive.infolist():
            if info.is_dir():
                continue
            with archive.open(info) as fh:
                if fh.read(4) != ELF_MAGIC:
                    continue
            yield info.filename, Path(archive.extract(info, into))


def generate() -> dict[str, Any]:
    declared = _declared()
    wheels: dict[str, Any] = {}
    with tempfile.TemporaryDirectory() as tmp:
        for entry in declared["wheel"]:
            requirement = entry["requirement"]
            target = Path(tmp) / canonical(requirement)
            subprocess.run(
                [
                    sys.executable,
                    "-m",
                    "pip",
                    "download",
                    "--no-deps",
                    "--only-binary=:all:",
                    "--python-version",
                    entry["python"],
                    "--platform",
                    "manylinux_2_28_x86_64",
                    "--platform",
                    "manylinux_2_17_x86_64",
                    "--index-url",
                    "https://pypi.org/simple",
                    "-d",
                    str(target),
                    requirement,
                ],
                check=True,
                timeout=DOWNLOAD_TIMEOUT_S,
            )
            (wheel,) = target.glob("*.whl")
            files = {name: read_dynamic(path) for name, path in elf_members(wheel, target / "x")}
            name, _, version = requirement.partition("==")
            wheels[f"{canonical(name)}=={version}"] = {
                "wheel": wheel.name,
                "files": dict(sorted(files.items())),
            }
    return {
        "generated_by": "python images/check_native_deps.py generate",
        "source": "readelf -d of every ELF file in the wheels of images/native-deps.toml [[wheel]]",
        "wheels": wheels,
    }


def main(argv: list[str]) -> int:
    command = argv[0] if argv else "check"
    if command == "generate":
        MANIFEST.write_text(json.dumps(generate(), indent=1, sort_keys=True) + "\n", encoding="utf-8")
        print(f"wrote {MANIFEST}")
        return 0
    if command != "check":
        print(__doc__, file=sys.stderr)
        return 2
    found = check()
    for line in found:
        print(line)
    print("all native libraries resolve" if not found else f"{len(found)} problem(s)")
    return 1 if found else 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv[1:]))
