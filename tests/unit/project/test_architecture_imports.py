"""No subsystem imports another outside the graph docs/architecture.md states (its import-rules
table is the one place the rule is written)."""

from __future__ import annotations

import ast
import re
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[3]
ARCHITECTURE = ROOT / "docs" / "architecture.md"
SUBSYSTEMS = ("core", "trace", "engine", "sim", "emulator", "epp", "operator", "bench")
ANY = "any"


def allowed_graph(text: str) -> dict[str, frozenset[str]]:
    """The ``<!-- import-rules -->`` table: subsystem -> the subsystems it may import (``any``
    for all). ``ValueError`` when the table is missing or malformed."""
    match = re.search(r"<!-- import-rules -->\n(.*?)<!-- end import-rules -->", text, re.S)
    if match is None:
        raise ValueError("docs/architecture.md has no <!-- import-rules --> table")
    graph: dict[str, frozenset[str]] = {}
    for line in match.group(1).splitlines()[2:]:
        cells = [c.strip() for c in line.strip().strip("|").split("|")]
        if len(cells) != 2:
            raise ValueError(f"import-rules row {line!r} needs two cells")
        name, may = cells
        targets = re.sub(r"\(.*\)", "", may).replace(",", " ").split()
        graph[name] = frozenset(targets)
    return graph


def package_owners(root: Path = ROOT) -> dict[str, str]:
    """``smetric.<package>`` -> the subsystem folder that holds it (``policy`` -> ``core``)."""
    return {pkg.name: sub for sub in SUBSYSTEMS for pkg in (root / sub / "smetric").iterdir() if pkg.is_dir()}


@dataclass(frozen=True)
class Import:
    file: Path
    line: int
    module: str


def imports_in(path: Path) -> Iterator[Import]:
    """Every absolute ``smetric.*`` import in a file, at any depth, and every
    ``importlib.import_module("smetric....")`` with a literal name."""
    tree = ast.parse(path.read_text(encoding="utf-8"), str(path))
    for node in ast.walk(tree):
        names: list[str] = []
        if isinstance(node, ast.Import):
            names = [a.name for a in node.names]
        elif isinstance(node, ast.ImportFrom) and node.level == 0 and node.module:
            names = [node.module]
        elif (
            isinstance(node, ast.Call)
            and getattr(node.func, "attr", getattr(node.func, "id", "")) == "import_module"
            and node.args
            and isinstance(node.args[0], ast.Constant)
            and isinstance(node.args[0].value, str)
        ):
            names = [node.args[0].value]
        for name in names:
            if name.startswith("smetric."):
                yield Import(path, getattr(node, "lineno", 0), name)


def violations(graph: dict[str, frozenset[str]], owners: dict[str, str], root: Path = ROOT) -> list[str]:
    out: list[str] = []
    for sub in SUBSYSTEMS:
        may = graph[sub]
        for path in sorted((root / sub).rglob("*.py")):
            for imp in imports_in(path):
                target = owners.get(imp.module.split(".")[1])
                if target is None or target == sub or ANY in may or target in may:
                    continue
                out.append(f"{imp.file.relative_to(root)}:{imp.line}: {sub} imports {imp.module} ({target})")
    return out


def test_the_table_names_every_subsystem_once() -> None:
    graph = allowed_graph(ARCHITECTURE.read_text(encoding="utf-8"))
    assert set(graph) == set(SUBSYSTEMS)
    for sub, may in graph.items():
        assert may <= {*SUBSYSTEMS, ANY}, (sub, may)
    assert set(package_owners().values()) == set(SUBSYSTEMS)


def test_no_import_outside_the_stated_graph() -> None:
    graph = allowed_graph(ARCHITECTURE.read_text(encoding="utf-8"))
    found = violations(graph, package_owners())
    assert found == [], "imports docs/architecture.md does not allow:\n" + "\n".join(found)


def test_a_forbidden_import_is_found_at_any_depth(tmp_path: Path) -> None:
    for sub in SUBSYSTEMS:
        (tmp_path / sub / "smetric" / sub).mkdir(parents=True)
    (tmp_path / "core" / "smetric" / "policy").mkdir()
    (tmp_path / "sim" / "smetric" / "sim" / "cli.py").write_text(
        "import smetric.core.presets\n"
        "def f():\n"
        "    from smetric.epp.config import load_config\n"
        "    import importlib\n"
        "    importlib.import_module('smetric.operator.spec')\n",
        encoding="utf-8",
    )
    (tmp_path / "bench" / "smetric" / "bench" / "run.py").write_text(
        "import smetric.epp.main\n", encoding="utf-8"
    )
    graph = allowed_graph(ARCHITECTURE.read_text(encoding="utf-8"))
    found = violations(graph, package_owners(tmp_path), tmp_path)
    assert found == [
        "sim/smetric/sim/cli.py:3: sim imports smetric.epp.config (epp)",
        "sim/smetric/sim/cli.py:5: sim imports smetric.operator.spec (operator)",
    ]


@pytest.mark.parametrize(
    "text",
    [
        "no table here",
        "<!-- import-rules -->\n| a | b |\n|---|---|\n| sim | core | x |\n<!-- end import-rules -->",
    ],
)
def test_a_missing_or_malformed_table_is_an_error(text: str) -> None:
    with pytest.raises(ValueError, match="import-rules"):
        allowed_graph(text)
