"""``smetric serve``'s routing lines from the picker's decision log."""

from __future__ import annotations

import asyncio
import io
from pathlib import Path

import orjson

from smetric.bench.serve_log import follow_decisions, routing_line

NAMES = {"127.0.0.1:9000": "engine0 127.0.0.1:9000", "127.0.0.1:9001": "engine1 127.0.0.1:9001"}
ROUTED = {
    "ts": 1.0, "level": "info", "msg": "routed", "request_id": "abcdef123456", "reason": "session",
    "policy": "smetric", "destination": "127.0.0.1:9001", "prefill": "127.0.0.1:9001",
    "prompt_tokens": 900, "local_hit_tokens": 640,
}  # fmt: skip


def test_a_routed_line_names_engine_reason_and_cached_tokens() -> None:
    line = routing_line(ROUTED, NAMES)
    assert line is not None
    assert "abcdef12 -> engine1 127.0.0.1:9001  reason=session  prompt=900 tok, cached=640" in line
    assert "prefill on" not in line and line.endswith("policy=smetric")
    pd = routing_line({**ROUTED, "prefill": "127.0.0.1:9000"}, NAMES)
    assert pd is not None and "(prefill on engine0 127.0.0.1:9000)" in pd


def test_warnings_pass_info_is_left_out() -> None:
    assert (
        routing_line({"level": "warning", "msg": "scrape failed"}, NAMES) == "picker warning: scrape failed"
    )
    assert routing_line({"level": "info", "msg": "started"}, NAMES) is None


async def test_follow_prints_whole_lines_as_they_come(tmp_path: Path) -> None:
    log, out = tmp_path / "picker.log", io.StringIO()
    task = asyncio.create_task(follow_decisions(log, NAMES, out))  # before the file exists
    await asyncio.sleep(0.3)
    raw = orjson.dumps(ROUTED)
    log.write_bytes(raw[:20])  # half a line: nothing yet
    await asyncio.sleep(0.5)
    assert out.getvalue() == ""
    with log.open("ab") as f:
        f.write(raw[20:] + b"\nTraceback (most recent call last):\n")
    await asyncio.sleep(0.5)
    task.cancel()
    lines = out.getvalue().splitlines()
    assert len(lines) == 2 and "-> engine1" in lines[0] and lines[1].startswith("Traceback")
