"""Each picker setting is declared once, in the flag table: its default is written nowhere else,
and the picker's settings objects are built from it."""

from __future__ import annotations

import ast
import dataclasses
from pathlib import Path

from smetric.core.pickerflags import FLAGS, UPSTREAM_FLAGS
from smetric.epp.server.servicer import ServicerSettings
from smetric.epp.settings import PickerSettings

ROOT = Path(__file__).resolve().parents[3]
# Where the parsed flags are read: PickerSettings.from_flags, the upstream flags' resolver and
# main (logging and start-up checks, before the settings exist).
READERS = tuple(ROOT / "epp/smetric/epp" / p for p in ("settings.py", "upstream/flags.py", "main.py"))


def _flag_backed() -> list[str]:
    picker = {f.name for f in dataclasses.fields(PickerSettings)}
    return [f.name for f in dataclasses.fields(ServicerSettings) if f.name in picker]


def test_picker_settings_have_no_defaults_of_their_own() -> None:
    own = [f.name for f in dataclasses.fields(PickerSettings) if f.default is not dataclasses.MISSING]
    assert own == [], "a default belongs in the flag table (smetric.core.pickerflags)"


def test_servicer_defaults_are_the_flag_tables() -> None:
    defaults, table = ServicerSettings(), PickerSettings.defaults()
    backed = _flag_backed()
    assert set(backed) >= {
        "max_body_bytes",
        "body_budget_bytes",
        "max_inflight_decisions",
        "decision_budget_s",
    }
    for name in backed:
        assert getattr(defaults, name) == getattr(table, name), name
    assert ServicerSettings.from_picker(table) == defaults


def test_the_servicer_gets_the_running_pickers_values() -> None:
    settings = PickerSettings.from_argv(
        [
            "--max-body-bytes=1234",
            "--body-budget-bytes=5678",
            "--max-inflight-decisions=3",
            "--decision-budget-ms=250",
            "--response-path=observer",
            "--disable-endpoint-subset-filter",
        ]
    )
    s = ServicerSettings.from_picker(settings, ["qwen"])
    assert (s.max_body_bytes, s.body_budget_bytes, s.max_inflight_decisions) == (1234, 5678, 3)
    assert (s.decision_budget_s, s.response_observer, s.subset_filter) == (0.25, True, False)
    assert s.served_models == frozenset({"qwen"})


def test_every_flag_is_read() -> None:
    """No flag in the table that no settings object reads (a dead or forgotten flag)."""
    read: set[str] = set()
    for path in READERS:
        for node in ast.walk(ast.parse(path.read_text(encoding="utf-8"))):
            if (
                isinstance(node, ast.Attribute)
                and isinstance(node.value, ast.Name)
                and node.value.id == "args"
            ):
                read.add(node.attr)
            elif isinstance(node, ast.Constant) and isinstance(node.value, str):
                read.add(node.value.replace("-", "_"))  # getattr(args, "name") in the resolver
    # accepted for the upstream chart's argument list; it has no effect because https is refused
    moot = {"model_server_metrics_https_insecure_skip_verify"}
    for flag in (*FLAGS, *UPSTREAM_FLAGS):
        dest = flag.name.replace("-", "_")
        # a row admitting one value is enforced by the parser itself (e.g. --pool-group)
        pinned = len(flag.choices) == 1
        assert dest in read or dest in moot or pinned, f"--{flag.name} is parsed but nothing reads it"
