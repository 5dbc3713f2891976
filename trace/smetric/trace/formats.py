"""Format detection and the one entry point: :func:`load_trace`."""

from __future__ import annotations

from pathlib import Path
from typing import Literal, get_args

import orjson

from smetric.trace.agentic import load_agentic
from smetric.trace.azure import COLUMNS as AZURE_COLUMNS
from smetric.trace.azure import load_azure
from smetric.trace.bailian import load_bailian
from smetric.trace.errors import OnError, TraceFormatError
from smetric.trace.model import Trace
from smetric.trace.mooncake import load_mooncake
from smetric.trace.reader import head

Format = Literal["agentic", "mooncake", "bailian", "azure"]
FORMATS: tuple[str, ...] = get_args(Format)

# Keys that identify each JSON-lines format (all must be present in the first record).
_JSON_SIGNATURES: tuple[tuple[Format, frozenset[str]], ...] = (
    ("agentic", frozenset({"sid", "hash_ranges"})),
    ("bailian", frozenset({"chat_id", "parent_chat_id", "hash_ids"})),
    ("mooncake", frozenset({"timestamp", "input_length", "hash_ids"})),
)


def detect_format(path: Path | str) -> Format:
    """Guess the format from the file's first line (gzip is looked through), else its extension."""
    path = Path(path)
    first = next((ln.strip() for ln in head(path, 1 << 16).splitlines() if ln.strip()), b"")
    if first.startswith(b"{"):
        try:
            record = orjson.loads(first)
        except orjson.JSONDecodeError:
            record = None  # a line longer than the peeked head, or malformed: decide on keys below
        keys = set(record) if isinstance(record, dict) else set()
        if not keys:  # fall back to a textual key scan of the (possibly truncated) first line
            keys = {k for _, sig in _JSON_SIGNATURES for k in sig if b'"' + k.encode() + b'"' in first}
        for name, signature in _JSON_SIGNATURES:
            if signature <= keys:
                return name
        raise TraceFormatError(path, 1, f"unrecognised JSON trace record with keys {sorted(keys)}")
    if first.decode("utf-8", "replace").split(",")[: len(AZURE_COLUMNS)] == list(AZURE_COLUMNS):
        return "azure"
    if path.suffix.lower() == ".csv":
        return "azure"
    raise TraceFormatError(
        path, 1, f"cannot detect the trace format; pass one of {', '.join(FORMATS)} explicitly"
    )


def load_trace(
    path: Path | str,
    format: str | None = None,
    *,
    max_context_tokens: int | None = None,
    share_system_prompt: bool = False,
    on_error: OnError = "raise",
) -> Trace:
    """Load any supported trace; ``format=None`` detects it (see :func:`detect_format`)."""
    path = Path(path)
    name = detect_format(path) if format is None else format
    if name not in FORMATS:
        raise ValueError(f"unknown trace format {name!r}; expected one of {', '.join(FORMATS)}")
    if share_system_prompt and name != "agentic":
        raise ValueError(
            f"share_system_prompt applies to the agentic format only (its hashes never cross "
            f"families); a {name} trace already shares its system prompt blocks or has no hashes"
        )
    if name == "agentic":
        return load_agentic(
            path,
            max_context_tokens=max_context_tokens,
            share_system_prompt=share_system_prompt,
            on_error=on_error,
        )
    if name == "mooncake":
        return load_mooncake(path, max_context_tokens=max_context_tokens, on_error=on_error)
    if name == "bailian":
        return load_bailian(path, max_context_tokens=max_context_tokens, on_error=on_error)
    return load_azure(path, max_context_tokens=max_context_tokens, on_error=on_error)
