"""Reading trace files: transparent gzip, numbered raw lines, first bytes for format detection."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Iterator
from pathlib import Path
from typing import BinaryIO

from smetric.trace.errors import TraceFormatError

_GZIP_MAGIC = b"\x1f\x8b"


def open_binary(path: Path) -> BinaryIO:
    """Open ``path`` for reading bytes, decompressing it if it is gzip (by content, not name)."""
    try:
        raw = path.open("rb")
    except OSError as exc:
        raise TraceFormatError(path, None, f"cannot open: {exc.strerror or exc}") from exc
    if raw.read(2) == _GZIP_MAGIC:
        raw.seek(0)
        return gzip.GzipFile(fileobj=raw, mode="rb")  # type: ignore[return-value]
    raw.seek(0)
    return raw


def head(path: Path, n_bytes: int = 4096) -> bytes:
    """The first ``n_bytes`` of the (decompressed) file."""
    with open_binary(path) as f:
        try:
            return f.read(n_bytes)
        except (OSError, EOFError, zlib.error) as exc:
            raise TraceFormatError(path, None, f"cannot read: {exc}") from exc


def numbered_lines(path: Path) -> Iterator[tuple[int, bytes]]:
    """``(line_number, stripped_line)`` for every non-blank line (1-based numbers)."""
    with open_binary(path) as f:
        try:
            for number, line in enumerate(f, 1):
                stripped = line.strip()
                if stripped:
                    yield number, stripped
        except (OSError, EOFError, zlib.error) as exc:  # truncated or corrupt gzip stream
            raise TraceFormatError(path, None, f"cannot read: {exc}") from exc
