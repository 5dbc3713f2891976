"""Results streamed as runs finish: a JSON-lines sidecar next to ``--json`` (``OUT.runs.jsonl``).

Line 1 is a header with the sweep's fingerprint (a hash of the JSON ``config``: trace, cluster,
policies, rates, seeds, regimes; and of the code that computes a run, :func:`code_digest`, so that
a default changed in the code, which the config does not spell out, refuses the old rows); each
further line is one finished run: its key, its row (exactly the row the final JSON gets) and, for
information, its wall time. An interrupted sweep keeps every
line written; ``--resume`` reads the rows back (a torn last line is ignored) and skips their runs,
refusing a sidecar whose fingerprint differs. The final JSON is rewritten atomically (temp file +
rename), so a reader never sees half a file.
"""

from __future__ import annotations

import fcntl
import gzip
import hashlib
import importlib.util
import json
import os
from collections.abc import Sequence
from pathlib import Path
from typing import IO, Any

from smetric.sim.sweep import RunCost, RunKey

FORMAT = "smetric-sim-runs/1"


# the packages whose code decides a run's row (a change in any of them changes the row)
RUN_CODE_PACKAGES: tuple[str, ...] = (
    "smetric.core",
    "smetric.policy",
    "smetric.router",
    "smetric.engine",
    "smetric.sim",
    "smetric.trace",
)


def code_digest(packages: Sequence[str] = RUN_CODE_PACKAGES) -> str:
    """A hash of the Python sources of ``packages`` (path and bytes of every ``.py`` file)."""
    h = hashlib.sha256()
    for name in packages:
        spec = importlib.util.find_spec(name)
        for root in sorted(spec.submodule_search_locations or ()) if spec else ():
            for path in sorted(Path(root).rglob("*.py")):
                h.update(f"{name}/{path.relative_to(root).as_posix()}\0".encode())
                h.update(path.read_bytes())
    return h.hexdigest()[:16]


def sidecar_path(json_path: Path) -> Path:
    return json_path.with_name(json_path.stem + ".runs.jsonl")


def fingerprint(config: object) -> str:
    return hashlib.sha256(json.dumps(config, sort_keys=True).encode()).hexdigest()[:32]


def read_rows(path: Path) -> tuple[dict[str, Any], dict[RunKey, dict[str, Any]]]:
    """A sidecar's header and the rows of its finished runs; empty for an empty file. A name ending
    in ``.gz`` is read gzipped (the committed results are). Only the last line may be torn (an
    interrupted sweep's): it is skipped. A header line further down is skipped too (sidecars of one
    regime's sweeps concatenated). Any other line that is not a finished run -- two writers
    interleaved, a bad concatenation -- raises ``ValueError`` naming the line: skipping it would
    drop a run and silently change every figure read from the file. Raises ``ValueError`` for a
    file that is not a sidecar."""
    if path.name.endswith(".gz"):
        try:
            text = gzip.decompress(path.read_bytes()).decode("utf-8")
        except (gzip.BadGzipFile, EOFError, UnicodeDecodeError):
            raise ValueError(f"{path}: not a sweep sidecar (not gzip of UTF-8 text)") from None
        lines = text.splitlines()
    else:
        with path.open("r", encoding="utf-8") as fh:
            lines = fh.read().splitlines()
    if not lines:
        return {}, {}
    try:
        head = json.loads(lines[0])
    except json.JSONDecodeError:
        raise ValueError(f"{path}: not a sweep sidecar (bad header)") from None
    if not isinstance(head, dict) or head.get("format") != FORMAT:
        raise ValueError(f"{path}: not a sweep sidecar ({FORMAT})")
    done: dict[RunKey, dict[str, Any]] = {}
    last = len(lines) - 1
    for n, line in enumerate(lines[1:], start=1):
        try:
            rec = json.loads(line)
            if isinstance(rec, dict) and rec.get("format") == FORMAT:
                continue  # the header of a concatenated sidecar
            regime, policy, seed, rate = rec["key"]
            key = RunKey(str(regime), str(policy), int(seed), float(rate))
            row = rec["row"]
            if not isinstance(row, dict):
                raise TypeError("row")
        except (json.JSONDecodeError, KeyError, TypeError, ValueError):
            if n == last:
                continue  # the last line, torn by an interruption
            raise ValueError(
                f"{path}: line {n + 1} is not a finished run (only the last line may be torn; "
                "two sweeps writing one sidecar interleave their lines)"
            ) from None
        done[key] = row
    return head, done


def read_done(path: Path, fp: str) -> dict[RunKey, dict[str, Any]]:
    """Rows of a previous run of the same sweep (empty when there is no sidecar)."""
    if not path.exists():
        return {}
    head, done = read_rows(path)
    if head and head.get("fingerprint") != fp:
        raise ValueError(
            f"{path} belongs to a different sweep (config or simulator code changed); remove it or drop --resume"
        )
    return done


class Sidecar:
    """Append-only writer; every line is flushed as soon as its run finishes. While open it holds
    an exclusive lock on the file (``flock``), so a second sweep given the same ``--json`` is
    refused instead of interleaving its lines with this one's. With ``resume`` the rows already
    there are kept (:attr:`done`; a sidecar of a different sweep is refused) and a torn last line
    dropped; without, the file starts over with the header."""

    def __init__(self, path: Path, fp: str, resume: bool) -> None:
        path.parent.mkdir(parents=True, exist_ok=True)
        self.path = path
        fh: IO[str] = path.open("a", encoding="utf-8")  # "a": nothing is truncated before the lock
        try:
            fcntl.flock(fh.fileno(), fcntl.LOCK_EX | fcntl.LOCK_NB)
        except BlockingIOError:  # held: another sweep writes this file
            fh.close()
            raise ValueError(
                f"{path}: another sweep is writing it; wait for that one to end or give this one another --json"
            ) from None
        except OSError:
            pass  # a filesystem without locks (ENOLCK, EOPNOTSUPP): the sweep runs unguarded, as before
        self._fh = fh
        self.done: dict[RunKey, dict[str, Any]] = {}
        try:
            if resume and path.stat().st_size > 0:
                self.done = read_done(path, fp)
                _drop_torn_tail(path)
            else:
                fh.truncate(0)
                self._write({"format": FORMAT, "fingerprint": fp})
        except BaseException:
            fh.close()
            raise

    def _write(self, obj: object) -> None:
        self._fh.write(json.dumps(obj, allow_nan=False) + "\n")
        self._fh.flush()

    def add(self, key: RunKey, row: dict[str, Any], cost: RunCost) -> None:
        rec = {
            "key": key.as_list(),
            "row": row,
            "wall_s": round(cost.wall_s, 4),
            "cpu_s": round(cost.cpu_s, 4),
        }
        self._write(rec)

    def close(self) -> None:
        self._fh.close()


def _drop_torn_tail(path: Path) -> None:
    data = path.read_bytes()
    if data and not data.endswith(b"\n"):
        cut = data.rfind(b"\n") + 1
        with path.open("r+b") as fh:
            fh.truncate(cut)


def write_atomic(path: Path, text: str) -> None:
    path.parent.mkdir(parents=True, exist_ok=True)
    tmp = path.with_name(f".{path.name}.{os.getpid()}.tmp")
    tmp.write_text(text, encoding="utf-8")
    os.replace(tmp, path)
