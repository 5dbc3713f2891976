"""Reading trace files: transparent gzip, numbered raw lines, first bytes for format detection."""

from __future__ import annotations

import gzip
import zlib
from collections.abc import Callable, Iterator
from pathlib import Path
from typing import BinaryIO, Protocol, TypeVar

import msgspec

from smetric.trace.errors import BadLines, TraceFormatError

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


class HashedLine(Protocol):
    @property
    def input_length(self) -> int: ...

    @property
    def hash_ids(self) -> list[int]: ...


LineT = TypeVar("LineT", bound=HashedLine)


def decode_hashed_lines(
    path: Path,
    bad: BadLines,
    line_type: type[LineT],
    label: str,
    block_tokens: int,
    check: Callable[[LineT], str | None] | None = None,
) -> list[LineT]:
    """Decode a JSON-lines trace whose records carry ``input_length`` and ``hash_ids``.

    A record that fails to decode, has more hash ids than ``ceil(input_length / block_tokens)``, or
    for which ``check`` returns a message is reported to ``bad`` (raise or skip-and-count).
    """
    decoder = msgspec.json.Decoder(line_type)
    lines: list[LineT] = []
    for number, raw in numbered_lines(path):
        try:
            line = decoder.decode(raw)
        except msgspec.MsgspecError as exc:
            bad.report(number, f"invalid {label} record: {exc}")
            continue
        max_blocks = -(-line.input_length // block_tokens)
        if len(line.hash_ids) > max_blocks:
            bad.report(
                number,
                f"{len(line.hash_ids)} hash_ids exceed ceil({line.input_length}/{block_tokens}) = {max_blocks}",
            )
            continue
        problem = check(line) if check is not None else None
        if problem is not None:
            bad.report(number, problem)
            continue
        lines.append(line)
    return lines
