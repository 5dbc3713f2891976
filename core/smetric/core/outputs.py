"""Output paths a command writes at its end, checked at its start: a path that cannot be written is
one line before any work (``smetric simulate``, ``bench``, ``chaos``, ``serve``)."""

from __future__ import annotations

from pathlib import Path


def check_writable(flag: str, path: Path) -> None:
    """``ValueError`` naming ``flag`` when ``path`` cannot be written (its folder is made; a file
    that did not exist is not left behind)."""
    if path.is_dir():
        raise ValueError(f"{flag} {path}: is a directory")
    existed = path.exists()
    try:
        path.parent.mkdir(parents=True, exist_ok=True)
        with path.open("ab"):
            pass
    except OSError as exc:
        raise ValueError(f"{flag} {path}: cannot write there ({exc.strerror or exc})") from None
    if not existed:
        path.unlink(missing_ok=True)
