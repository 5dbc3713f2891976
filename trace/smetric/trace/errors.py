"""Malformed trace input: one error type that names the file and line, and a skip-and-count policy."""

from __future__ import annotations

from dataclasses import dataclass, field
from pathlib import Path
from typing import Literal

OnError = Literal["raise", "skip"]

# How many skipped-line messages a trace keeps in its notes (the count is always exact).
_KEPT_MESSAGES = 5


class TraceFormatError(ValueError):
    """A trace file that cannot be read as the requested format: ``path:line: message``."""

    def __init__(self, path: Path | str, line: int | None, message: str) -> None:
        self.path = str(path)
        self.line = line
        self.message = message
        where = f"{self.path}:{line}" if line is not None else self.path
        super().__init__(f"{where}: {message}")

    def __reduce__(self) -> tuple[type[TraceFormatError], tuple[str, int | None, str]]:
        """Rebuilt from its three fields: a worker process's error reaches its parent whole."""
        return (type(self), (self.path, self.line, self.message))


@dataclass
class BadLines:
    """Collects malformed lines: raises on the first one (``"raise"``) or counts them (``"skip"``)."""

    path: Path
    on_error: OnError = "raise"
    count: int = 0
    messages: list[str] = field(default_factory=list)

    def __post_init__(self) -> None:
        if self.on_error not in ("raise", "skip"):
            raise ValueError(f"on_error must be 'raise' or 'skip', got {self.on_error!r}")

    def report(self, line: int, message: str) -> None:
        error = TraceFormatError(self.path, line, message)
        if self.on_error == "raise":
            raise error
        self.count += 1
        if len(self.messages) < _KEPT_MESSAGES:
            self.messages.append(str(error))

    def notes(self) -> list[str]:
        if not self.count:
            return []
        return [f"skipped {self.count} malformed line(s); first: " + " | ".join(self.messages)]
