"""``smetric`` console script: dispatches to each subsystem's own ``main(argv)``.

Subcommand modules are imported only when invoked, so ``smetric trace stats`` does not pay for
grpc/envoy imports and a subsystem's optional dependency never breaks the others.
"""

from __future__ import annotations

import importlib
import sys
from collections.abc import Sequence

COMMANDS: dict[str, tuple[str, str]] = {
    "simulate": ("smetric.sim.cli", "trace-driven cluster simulation of routing policies"),
    "trace": ("smetric.trace.cli", "trace analysis (`smetric trace stats PATH`)"),
    "emulate": ("smetric.emulator.cli", "serve N emulated vLLM instances (GPU-free backend)"),
    "bench": ("smetric.bench.cli", "end-to-end benchmark: Envoy + picker + emulated cluster"),
    "epp": ("smetric.epp.main", "run the endpoint picker (same as `smetric-epp`)"),
    "chaos": ("smetric.bench.chaos", "fault and hostile-input run: Envoy + picker + emulated engines"),
}


def _usage() -> str:
    lines = ["usage: smetric COMMAND [ARGS...]", "", "commands:"]
    lines += [f"  {name:<10} {help_}" for name, (_, help_) in COMMANDS.items()]
    lines.append("\n`smetric COMMAND --help` shows a command's options.")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if not args or args[0] in ("-h", "--help"):
        print(_usage())
        return 0 if args else 2
    name, rest = args[0], args[1:]
    if name not in COMMANDS:
        print(f"smetric: unknown command {name!r}\n\n{_usage()}", file=sys.stderr)
        return 2
    module = importlib.import_module(COMMANDS[name][0])
    result: int = module.main(rest)
    return result


if __name__ == "__main__":
    raise SystemExit(main())
