"""Loader for the Azure LLM inference traces (2023, Splitwise): ``TIMESTAMP,ContextTokens,GeneratedTokens``.

No hashes and no sessions: every request is its own session and family, starting at its recorded
arrival (seconds after the first row). ``has_hashes=False`` and ``block_tokens=0`` (there are no
blocks: consumers must not derive reuse from this trace).
"""

from __future__ import annotations

import csv
import io
import itertools
import zlib
from datetime import datetime
from pathlib import Path

import numpy as np

from smetric.trace.build import build_trace
from smetric.trace.errors import BadLines, OnError, TraceFormatError
from smetric.trace.model import Trace, TraceRequest
from smetric.trace.reader import open_binary

COLUMNS = ("TIMESTAMP", "ContextTokens", "GeneratedTokens")


def _row(row: list[str]) -> tuple[datetime, int, int]:
    if len(row) != len(COLUMNS):
        raise ValueError(f"expected {len(COLUMNS)} columns, got {len(row)}")
    stamp = datetime.fromisoformat(row[0].strip())
    prompt, output = int(row[1]), int(row[2])
    if prompt < 0 or output < 0:
        raise ValueError("token counts must be >= 0")
    return stamp, prompt, output


def load_azure(
    path: Path | str,
    *,
    max_context_tokens: int | None = None,
    on_error: OnError = "raise",
) -> Trace:
    path = Path(path)
    bad = BadLines(path, on_error)
    with open_binary(path) as f:
        try:
            text = io.TextIOWrapper(f, encoding="utf-8", newline="")
            rows = list(csv.reader(text))
        except (OSError, EOFError, zlib.error, UnicodeDecodeError, csv.Error) as exc:
            raise TraceFormatError(path, None, f"cannot read as CSV: {exc}") from exc
    if not rows or [c.strip() for c in rows[0]] != list(COLUMNS):
        found = rows[0] if rows else "an empty file"
        raise TraceFormatError(path, 1, f"expected header {','.join(COLUMNS)}, found {found}")
    parsed: list[tuple[datetime, int, int]] = []
    for number, row in enumerate(rows[1:], 2):
        if not any(c.strip() for c in row):
            continue
        try:
            parsed.append(_row(row))
        except ValueError as exc:
            bad.report(number, f"invalid azure row {row}: {exc}")
    notes = ["azure: no hashes and no sessions; every request is its own session at its recorded arrival"]
    if any(b[0] < a[0] for a, b in itertools.pairwise(parsed)):
        parsed.sort(key=lambda p: p[0])
        notes.append("rows were not in time order; sorted by TIMESTAMP")
    empty = np.empty((0, 2), dtype=np.int64)
    requests: list[TraceRequest] = []
    starts: dict[str, float] = {}
    for i, (stamp, prompt, output) in enumerate(parsed):
        sid = f"az{i:06d}"
        starts[sid] = (stamp - parsed[0][0]).total_seconds()
        requests.append(
            TraceRequest(
                index=i,
                session_id=sid,
                family_id=sid,
                parent_session_id=None,
                turn=0,
                offset_s=0.0,
                think_time_s=0.0,
                prompt_tokens=prompt,
                output_tokens=output,
                hash_ranges=empty,
                trigger="first",
            )
        )
    notes += bad.notes()
    return build_trace(
        path,
        "azure",
        requests,
        notes,
        max_context_tokens=max_context_tokens,
        skipped_malformed=bad.count,
        block_tokens=0,
        family_starts_s=starts,
        has_sessions=False,
        has_hashes=False,
    )
