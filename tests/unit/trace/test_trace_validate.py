"""``smetric trace validate``: a trace of one's own is checked before a run (docs/traces.md)."""

from __future__ import annotations

from pathlib import Path

import pytest

from smetric.trace.cli import main

GOOD = (
    '{"sid": "a", "turn": 0, "t": 0, "inp": 200, "out": 5, "hash_ranges": [[1, 3]]}\n'
    '{"sid": "a", "turn": 1, "t": 9.5, "inp": 300, "out": 7, "hash_ranges": [[1, 4]]}\n'
    '{"sid": "a::sub", "parent_sid": "a", "turn": 0, "t": 3, "inp": 64, "out": 2, "hash_ranges": [[9, 9]]}\n'
)


def test_a_valid_trace_gets_one_line_on_what_it_holds(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text(GOOD)
    assert main(["validate", str(path)]) == 0
    out = capsys.readouterr().out.strip()
    assert out == (
        f"{path}: valid agentic trace: 3 requests, 2 sessions, 1 families, 64-token blocks; "
        "usable by smetric bench and smetric simulate"
    )


@pytest.mark.parametrize(
    ("line", "why"),
    [
        (
            '{"sid": "b", "turn": 0, "t": 0, "inp": 100, "out": 5, "hash_ranges": [[1, 2]]}',
            "exceed the prompt",
        ),
        ('{"sid": "b", "turn": 0, "t": 0, "inp": 100, "out": 5}', "hash_ranges"),
        ("{not json", ":4:"),
    ],
)
def test_the_first_bad_line_is_named(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], line: str, why: str
) -> None:
    path = tmp_path / "mine.jsonl"
    path.write_text(GOOD + line + "\n")
    assert main(["validate", str(path)]) == 1
    err = capsys.readouterr().err
    assert err.startswith(f"smetric trace validate: invalid: {path}:4: ") and why in err


def test_a_missing_file_is_invalid(tmp_path: Path, capsys: pytest.CaptureFixture[str]) -> None:
    assert main(["validate", str(tmp_path / "nope.jsonl")]) == 1
    assert "invalid" in capsys.readouterr().err
