"""The docs' generated blocks (docs/gen.py) are current, and the generator sees what changes."""

from __future__ import annotations

import shutil
from pathlib import Path
from types import ModuleType

import pytest
from prometheus_client import CollectorRegistry
from pydantic import Field

from smetric.epp.obs.metrics import PickerMetrics
from smetric.policy.params import ParamsModel
from smetric.policy.registry import REGISTRY, PolicyEntry
from smetric.policy.round_robin import RoundRobin
from tests.support.scripts import load_script

DOCS = Path(__file__).resolve().parents[3] / "docs"


def _load() -> ModuleType:
    return load_script(DOCS / "gen.py", "smetric_docs_gen")


gen = _load()


def test_generated_blocks_are_current() -> None:
    stale = gen.stale()
    assert not stale, f"{', '.join(p.name for p in stale)}: stale generated blocks; run: {gen.COMMAND}"


def _copy_docs(tmp_path: Path) -> Path:
    for file, _ in gen.BLOCKS.values():
        shutil.copy(DOCS / file, tmp_path / file)
    return tmp_path


def test_a_hand_edit_inside_a_block_is_stale(tmp_path: Path) -> None:
    docs = _copy_docs(tmp_path)
    policies = docs / "policies.md"
    text = policies.read_text(encoding="utf-8")
    edited = text.replace(
        "| `overload` | smetric-overload | `2.0` |", "| `overload` | smetric-overload | `3.0` |"
    )
    assert edited != text
    policies.write_text(edited, encoding="utf-8")
    assert gen.stale(docs) == [policies]
    assert gen.expected(docs)[policies] == text  # the command puts it back


class _QueueParams(ParamsModel):
    queue_weight: float = Field(default=1.5, gt=0, le=8, description="Weight of queued prefill tokens.")


def test_a_new_policy_parameter_reaches_the_table() -> None:
    registry = REGISTRY.with_entries(PolicyEntry("least-queue", RoundRobin, _QueueParams))
    table = gen.policy_parameters(registry)
    row = next(line for line in table.splitlines() if line.startswith("| `queueWeight`"))
    assert (
        row
        == "| `queueWeight` / `queue_weight` | least-queue | `1.5` | 0 < x ≤ 8 | Weight of queued prefill tokens. |"
    )
    assert "| `queueWeight`" not in gen.policy_parameters()


def test_every_registered_series_is_listed() -> None:
    """The tables name exactly what the picker exports (read through the public ``collect``)."""
    registry = CollectorRegistry()
    PickerMetrics(registry, "pool")
    exported = {
        f"{family.name}_total" if family.type == "counter" else family.name for family in registry.collect()
    }
    rows = [
        line
        for table in (gen.picker_metrics(), gen.upstream_metrics(), gen.llmd_metrics())
        for line in table.splitlines()[2:]
    ]
    listed = {name.strip(" `") for row in rows for name in row.split("|")[1].split(",")}
    assert listed == exported


def test_every_crd_field_is_a_row() -> None:
    from smetric.operator.crdschema import walk
    from smetric.operator.spec import SMetricPoolSpec

    rows = {line.split("|")[1].strip(" `"): line for line in gen.crd_fields().splitlines()[2:]}
    for field in walk(SMetricPoolSpec):
        parts = field.path.split(".")
        ancestors = [".".join(parts[:i]) for i in range(1, len(parts))]
        # an object listed under an earlier path (topology.decode, the pod overrides) points there
        collapsed = any("Fields as" in rows.get(a, "") for a in ancestors)
        assert field.path in rows or collapsed, field.path


@pytest.mark.parametrize(
    ("text", "error"),
    [
        ("<!-- generated: nope -->\n<!-- end generated -->\n", "unknown generated block 'nope'"),
        ("<!-- generated: a -->\nrow\n", "has no <!-- end generated -->"),
        ("<!-- generated: a -->\n<!-- generated: a -->\n<!-- end generated -->\n", "not closed"),
        ("<!-- generated: a -->\n<!-- end generated -->\n" * 2, "appears twice"),
        ("no markers\n", "block\\(s\\) a not found"),
    ],
)
def test_marker_problems_are_clear_errors(text: str, error: str) -> None:
    with pytest.raises(ValueError, match=error):
        gen.render(text, {"a": "body\n"})


def test_render_replaces_only_the_block() -> None:
    text = "before\n<!-- generated: a -->\nold\n<!-- end generated -->\nafter\n"
    assert (
        gen.render(text, {"a": "new\n"})
        == "before\n<!-- generated: a -->\nnew\n<!-- end generated -->\nafter\n"
    )


def test_the_command_checks(capsys: pytest.CaptureFixture[str]) -> None:
    assert gen.main(["--check"]) == 0
