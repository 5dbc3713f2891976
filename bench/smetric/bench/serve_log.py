"""``smetric serve``'s routing lines: the picker's decision log (``--decision-log``: one JSON object
per routed request, message ``routed``, on its stderr, which the supervisor writes to its log file)
followed like ``tail -f`` and printed one short line per request. The picker's warnings and errors
are passed on as they are."""

from __future__ import annotations

import asyncio
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any, TextIO

import orjson

POLL_S = 0.2  # how often the log file is read for new lines
MAX_LINE_BYTES = 1 << 20  # a longer line (never written by the picker) is skipped, not buffered
READ_CHUNK_BYTES = 1 << 16


def routing_line(doc: Mapping[str, Any], names: Mapping[str, str]) -> str | None:
    """One picker log object as a line for the terminal; ``None`` for one to leave out."""
    if doc.get("msg") == "routed":
        dest = str(doc.get("destination", ""))
        when = time.strftime("%H:%M:%S", time.localtime(float(doc.get("ts", 0.0)) or None))
        rid = str(doc.get("request_id") or doc.get("picker_request_id") or "-")[:8]
        prefill = doc.get("prefill")
        pd = f" (prefill on {names.get(str(prefill), prefill)})" if prefill and prefill != dest else ""
        return (
            f"{when} {rid:<8} -> {names.get(dest, dest)}{pd}  reason={doc.get('reason', '?')}  "
            f"prompt={doc.get('prompt_tokens', '?')} tok, cached={doc.get('local_hit_tokens', '?')} "
            f"(picker's estimate)  policy={doc.get('policy', '?')}"
        )
    if doc.get("level") in ("warning", "error", "critical"):
        return f"picker {doc.get('level')}: {doc.get('msg', '')}"
    return None


def parse(raw: bytes) -> dict[str, Any] | None:
    try:
        doc = orjson.loads(raw)
    except orjson.JSONDecodeError:
        return None
    return doc if isinstance(doc, dict) else None


async def follow_decisions(path: Path, names: Mapping[str, str], out: TextIO) -> None:
    """Print a line per new routed request in ``path`` until cancelled (the file may not exist
    yet; a line that is not JSON, e.g. a traceback, is printed as it is)."""
    offset = 0
    pending = b""
    while True:
        try:
            with path.open("rb") as f:
                f.seek(offset)
                chunk = f.read(READ_CHUNK_BYTES)
        except FileNotFoundError:
            chunk = b""
        offset += len(chunk)
        pending += chunk
        *lines, pending = pending.split(b"\n")
        if len(pending) > MAX_LINE_BYTES:
            pending = b""
        for raw in lines:
            if not raw.strip():
                continue
            doc = parse(raw)
            text = routing_line(doc, names) if doc is not None else raw.decode(errors="replace")
            if text is not None:
                print(text, file=out, flush=True)
        if len(chunk) < READ_CHUNK_BYTES:
            await asyncio.sleep(POLL_S)
