"""The source layout (docs/architecture.md): each top-level folder holds ``<folder>/smetric/<pkg>/``
and every place that lists the source folders names all of them."""

from __future__ import annotations

import re
import tomllib
from pathlib import Path

ROOT = Path(__file__).resolve().parents[3]


def _source_folders() -> set[str]:
    return {p.parent.name for p in ROOT.glob("*/smetric") if p.is_dir() and p.parent.name != "tests"}


def test_each_folder_holds_what_its_name_says() -> None:
    folders = _source_folders()
    assert {"core", "sim", "engine", "trace", "emulator", "bench", "epp", "operator"} <= folders
    for folder in folders - {"core"}:
        packages = {p.name for p in (ROOT / folder / "smetric").iterdir() if (p / "__init__.py").exists()}
        assert packages == {folder}, f"{folder}/smetric holds {sorted(packages)}"
    for folder in folders:
        assert not (ROOT / folder / "smetric" / "__init__.py").exists(), "smetric is a namespace package"


def test_every_list_of_source_folders_names_them_all() -> None:
    folders = _source_folders()
    config = tomllib.loads((ROOT / "pyproject.toml").read_text())
    tool = config["tool"]
    assert set(tool["hatch"]["build"]["targets"]["wheel"]["packages"]) == {f"{f}/smetric" for f in folders}
    assert set(tool["hatch"]["build"]["dev-mode-dirs"]) == folders
    assert set(tool["ruff"]["src"]) == folders | {"tests"}
    assert set(tool["mypy"]["mypy_path"].split(":")) == folders
    checked = {f.split("/")[0] for f in tool["mypy"]["files"]}
    assert checked == folders
    for name in ("emulator", "epp", "operator", "sim"):
        text = (ROOT / "images" / f"{name}.Dockerfile").read_text()
        copied = {src.split("/")[0] for src in re.findall(r"^COPY (?!--from)(\S+) ", text, flags=re.M)}
        assert folders <= copied, f"{name}.Dockerfile does not copy {sorted(folders - copied)}"
