"""``smetric trace stats PATH``: the paper's §3 trace statistics as a table and optional JSON;
``smetric trace validate PATH``: check a trace of one's own before a run; ``smetric trace synth PATH``:
write the synthetic agentic trace (docs/traces.md)."""

from __future__ import annotations

import argparse
import sys
from collections.abc import Sequence
from dataclasses import replace
from pathlib import Path

import orjson

from smetric.core.argparsing import OneLineErrors
from smetric.core.outputs import check_writable
from smetric.trace.errors import TraceFormatError
from smetric.trace.formats import FORMATS, load_trace
from smetric.trace.report import print_stats
from smetric.trace.stats import compute_stats, stats_to_json
from smetric.trace.synth import SynthParams
from smetric.trace.synth import write as synth_write


def _parser() -> argparse.ArgumentParser:
    parser = OneLineErrors(prog="smetric trace", description="Trace analysis.")
    sub = parser.add_subparsers(dest="command", required=True)
    stats = sub.add_parser("stats", help="reuse, session and arrival statistics of a trace")
    stats.add_argument("path", type=Path, help="trace file (.jsonl, .jsonl.gz or .csv)")
    stats.add_argument("--format", choices=FORMATS, help="override format detection")
    stats.add_argument("--json", type=Path, metavar="FILE", help="also write the statistics as JSON")
    stats.add_argument("--max-context", type=int, metavar="N", help="drop requests longer than N tokens")
    stats.add_argument("--instances", type=int, metavar="N", help="report requests/min per instance for N")
    stats.add_argument(
        "--family-rate",
        type=float,
        metavar="R",
        help="assumed session-family arrivals per second for traces without a global clock "
        "(default: all families over one hour); overrides recorded times when given",
    )
    stats.add_argument(
        "--share-system-prompt",
        action="store_true",
        help="agentic only: map first requests' system blocks to one shared id sequence per model",
    )
    stats.add_argument(
        "--skip-malformed", action="store_true", help="skip and count malformed lines instead of failing"
    )
    validate = sub.add_parser(
        "validate", help="check a trace file: the first bad line, or one line on what it holds"
    )
    validate.add_argument("path", type=Path, help="trace file (.jsonl, .jsonl.gz or .csv)")
    validate.add_argument("--format", choices=FORMATS, help="override format detection")
    synth = sub.add_parser(
        "synth",
        help="write the synthetic agentic trace (the held-out second workload; docs/traces.md)",
    )
    synth.add_argument("path", type=Path, help="output file (.jsonl or .jsonl.gz)")
    synth.add_argument("--seed", type=int, default=1, help="generator seed (default 1, the one reported)")
    synth.add_argument("--families", type=int, default=SynthParams().families, help="session families")
    return parser


def write_synth(path: Path, seed: int, families: int) -> int:
    """0 and one line on what was written; 2 and one line for a bad option or an unwritable path."""
    if families < 1:
        print(f"smetric trace synth: --families must be >= 1, got {families}", file=sys.stderr)
        return 2
    try:
        n = synth_write(path, replace(SynthParams(), families=families), seed)
    except OSError as exc:
        print(f"smetric trace synth: cannot write {path}: {exc.strerror or exc}", file=sys.stderr)
        return 2
    print(f"{path}: {n} requests, {families} families, seed {seed} (smetric trace validate {path})")
    return 0


def validate(path: Path, fmt: str | None) -> int:
    """0 and a one-line summary for a valid trace; 1 and ``path:line: why`` for the first bad line."""
    try:
        trace = load_trace(path, fmt, on_error="raise")
    except (TraceFormatError, ValueError, OSError) as exc:
        print(f"smetric trace validate: invalid: {exc}", file=sys.stderr)
        return 1
    reqs = trace.requests
    sessions = len({r.session_id for r in reqs})
    families = len({r.family_id for r in reqs})
    bench = (
        "usable by smetric bench and smetric simulate"
        if trace.format == "agentic"
        else "usable by smetric simulate (smetric bench replays the agentic format)"
    )
    print(
        f"{path}: valid {trace.format} trace: {len(reqs)} requests, {sessions} sessions"
        f"{' (inferred)' if trace.sessions_inferred else ''}, {families} families, "
        f"{trace.block_tokens}-token blocks{'' if trace.has_hashes else ' (no hashes)'}; {bench}"
    )
    return 0


def main(argv: Sequence[str] | None = None) -> int:
    try:
        args = _parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    except SystemExit as exc:  # --help or a usage error: argparse already printed the message
        return exc.code if isinstance(exc.code, int) else 2
    if args.command == "validate":
        return validate(args.path, args.format)
    if args.command == "synth":
        return write_synth(args.path, args.seed, args.families)
    try:  # the output path before the trace is read: an unwritable --json costs no work
        if args.json is not None:
            check_writable("--json", args.json)
        trace = load_trace(
            args.path,
            args.format,
            max_context_tokens=args.max_context,
            share_system_prompt=args.share_system_prompt,
            on_error="skip" if args.skip_malformed else "raise",
        )
        stats = compute_stats(trace, instances=args.instances, family_rate_per_s=args.family_rate)
    except (TraceFormatError, ValueError) as exc:
        print(f"smetric trace stats: error: {exc}", file=sys.stderr)
        return 2
    print_stats(stats)
    if args.json is not None:
        try:
            args.json.write_bytes(orjson.dumps(stats_to_json(stats), option=orjson.OPT_INDENT_2))
        except OSError as exc:
            print(f"smetric trace stats: error: cannot write {args.json}: {exc}", file=sys.stderr)
            return 2
    return 0
