"""The evidence commands' inputs and outputs, checked with one-line errors before any work: a JSON
that is missing, malformed or not the expected document, a trace that does not load, an output path
that cannot be written. :func:`command` runs a module's ``main`` and turns those errors into one
line on stderr and exit status 2."""

from __future__ import annotations

import gzip
import json
import sys
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

from smetric.bench.procs import stopped
from smetric.core.outputs import check_writable
from smetric.core.stopping import sigterm_raises_interrupt
from smetric.trace.errors import TraceFormatError

SWEEP = "a `smetric simulate --json` output"
SWEEP_KEYS = ("results",)
ROW_KEYS = ("policy", "rate_multiplier", "seed")


class InputError(ValueError):
    """An evidence command's input or output cannot be used: ``path: what is wrong``."""


def read_text(path: Path, what: str) -> str:
    """The UTF-8 text of ``path`` (gzipped when its name ends in ``.gz``, as the committed results
    are); a file that cannot be read, a gzip cut short or bytes that are not UTF-8 (``not what``)
    are :class:`InputError`."""
    try:
        raw = path.read_bytes()
        if path.name.endswith(".gz"):
            raw = gzip.decompress(raw)
        return raw.decode("utf-8")
    except OSError as exc:  # gzip.BadGzipFile is one
        raise InputError(f"{path}: cannot read it ({exc.strerror or exc})") from None
    except EOFError:
        raise InputError(f"{path}: cannot read it (a gzip file cut short)") from None
    except UnicodeDecodeError:
        raise InputError(f"{path}: not {what} (not UTF-8 text)") from None


def read_json(
    path: Path | str, what: str = SWEEP, keys: Sequence[str] = SWEEP_KEYS, row_keys: Sequence[str] = ROW_KEYS
) -> dict[str, Any]:
    """The JSON object in ``path`` (gzipped when its name ends in ``.gz``, as the committed results are), with
    each of ``keys``; when ``results`` is among them, every row of it an object with each of ``row_keys``."""
    p = Path(path)
    text = read_text(p, what)
    try:
        doc = json.loads(text)
    except json.JSONDecodeError as exc:
        raise InputError(f"{p}: not valid JSON (line {exc.lineno}, column {exc.colno}: {exc.msg})") from None
    if not isinstance(doc, dict):
        raise InputError(f"{p}: not {what} (a JSON {type(doc).__name__}, not an object)")
    missing = [k for k in keys if k not in doc]
    if missing:
        raise InputError(f"{p}: not {what} (no {', '.join(map(repr, missing))})")
    if "results" in keys:
        check_rows(p, doc["results"], what, row_keys)
    return doc


def check_rows(path: Path, rows: object, what: str = SWEEP, row_keys: Sequence[str] = ROW_KEYS) -> None:
    """``rows`` is a list of objects with each of ``row_keys``, else :class:`InputError`."""
    if not isinstance(rows, list):
        raise InputError(f"{path}: not {what} ('results' is not a list)")
    for i, row in enumerate(rows):
        lacks = [k for k in row_keys if k not in row] if isinstance(row, dict) else list(row_keys)
        if lacks:
            raise InputError(f"{path}: not {what} (result {i} has no {', '.join(map(repr, lacks))})")


def check_output(flag: str, path: Path | str) -> None:
    """An output path that cannot be written is an :class:`InputError` (checked before any work)."""
    try:
        check_writable(flag, Path(path))
    except ValueError as exc:
        raise InputError(str(exc)) from None


def check_trace(path: Path | str) -> None:
    """The agentic trace loads (the workers load it again); else an :class:`InputError`."""
    from smetric.trace import load_agentic

    p = Path(path)
    if not p.is_file():
        raise InputError(f"--trace {p}: not found")
    try:
        trace = load_agentic(p, share_system_prompt=True)
    except TraceFormatError as exc:
        raise InputError(f"--trace {exc}") from None
    except (OSError, EOFError) as exc:
        raise InputError(f"--trace {p}: cannot read it ({getattr(exc, 'strerror', None) or exc})") from None
    if not trace.requests:
        raise InputError(f"--trace {p}: no request in it")


def command(main: Callable[[Sequence[str] | None], int], argv: Sequence[str] | None, prog: str) -> int:
    """``main(argv)``; an :class:`InputError` or a trace's format error is one line on stderr and
    exit status 2. SIGTERM unwinds as Ctrl-C does (the tool's ``process_pool`` stops its workers);
    either is one line and exit status 143 / 130."""
    try:
        with sigterm_raises_interrupt():
            return main(argv)
    except (InputError, TraceFormatError) as exc:
        print(f"{prog}: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt as exc:
        return stopped(prog, exc)
