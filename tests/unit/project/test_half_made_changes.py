"""Half-made changes fail here: a picker setting nothing reads, a flag whose allowed values are not
declared in its table row (or that the table lets through)."""

from __future__ import annotations

import ast
import dataclasses
import re
from pathlib import Path

import pytest

from smetric.core.blockhash import HASH_ALGOS
from smetric.core.pickerflags import FLAGS, UPSTREAM_FLAGS, build_parser, render_args
from smetric.epp.settings import PickerSettings

ROOT = Path(__file__).resolve().parents[3]
EPP = ROOT / "epp" / "smetric" / "epp"

# Flags whose help lists values with " | " but that accept more than the list: checked elsewhere, why.
OPEN_VALUE_SETS = {
    "log-level": "any logging level name, any case (configure_logging refuses others with exit 2)",
    "zap-log-level": "upstream's names or an integer level (smetric.epp.upstream.flags parses it)",
}


def _attributes_read(exclude: Path) -> set[str]:
    names: set[str] = set()
    for path in EPP.rglob("*.py"):
        if path == exclude:
            continue
        for node in ast.walk(ast.parse(path.read_text())):
            if isinstance(node, ast.Attribute):
                names.add(node.attr)
            elif (
                isinstance(node, ast.Call)
                and getattr(node.func, "id", "") == "getattr"
                and len(node.args) > 1
                and isinstance(node.args[1], ast.Constant)
            ):
                names.add(str(node.args[1].value))
    return names


def test_every_picker_setting_is_read_somewhere() -> None:
    """A ``PickerSettings`` field that no module of the picker reads is a flag that does nothing."""
    read = _attributes_read(exclude=EPP / "settings.py")
    unread = [f.name for f in dataclasses.fields(PickerSettings) if f.name not in read]
    assert not unread, f"PickerSettings fields nothing in epp/ reads: {unread}"


def _table() -> tuple:
    return (*FLAGS, *UPSTREAM_FLAGS)


def test_enumerated_flags_declare_their_choices() -> None:
    enumerated = [f.name for f in _table() if re.search(r"\S \| \S", f.help) and f.type is str]
    missing = [
        n
        for n in enumerated
        if n not in OPEN_VALUE_SETS and not next(f for f in _table() if f.name == n).choices
    ]
    assert not missing, f"flags listing values in their help without `choices` in the table: {missing}"


@pytest.mark.parametrize("flag", [f for f in _table() if f.choices], ids=lambda f: f.name)
def test_a_value_outside_the_table_row_is_refused(flag, capsys: pytest.CaptureFixture[str]) -> None:
    parser = build_parser()
    for value in flag.choices:
        assert getattr(parser.parse_args([f"--{flag.name}={value}"]), flag.name.replace("-", "_")) == value
    assert flag.default in flag.choices
    with pytest.raises(SystemExit) as exited:
        parser.parse_args([f"--{flag.name}=not-a-choice"])
    assert exited.value.code == 2
    err = capsys.readouterr().err.strip()
    assert "invalid choice: 'not-a-choice'" in err and "\n" not in err  # one line
    with pytest.raises(ValueError, match="not one of"):
        render_args({flag.name: "not-a-choice"})
    assert render_args({flag.name: flag.choices[0]}) == [f"--{flag.name}={flag.choices[0]}"]


def test_hash_algo_choices_are_the_hashers_the_picker_has() -> None:
    (flag,) = [f for f in FLAGS if f.name == "hash-algo"]
    assert flag.choices == HASH_ALGOS
