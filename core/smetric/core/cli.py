"""``smetric`` console script: dispatches to the subcommands the installed subsystems contribute.

A subsystem contributes a command with one entry point in the ``smetric.commands`` group (in
``pyproject.toml``: ``simulate = "smetric.sim.cli:main"``, a ``main(argv) -> int``); the core
knows no subsystem by name. A command's module is imported only when that command runs, so
``smetric trace stats`` does not pay for grpc/envoy imports and a subsystem's optional dependency
never breaks the others; ``smetric --help`` reads each command's one-line summary from its
module docstring without importing it.
"""

from __future__ import annotations

import ast
import importlib.util
import re
import sys
import textwrap
from collections.abc import Callable, Sequence
from importlib.metadata import EntryPoint, PackageNotFoundError, entry_points, version

GROUP = "smetric.commands"
_COMMAND_PREFIX = re.compile(r"^``[^`]+``(?:\s*\([^)]*\))?:\s*")  # "``smetric x``: ", "``a`` (also ``b``): "
_WIDTH = 100  # the help's line width; a longer summary wraps under its command


def commands() -> dict[str, EntryPoint]:
    """The installed subcommands by name (the ``smetric.commands`` entry points), sorted."""
    return {ep.name: ep for ep in sorted(entry_points(group=GROUP), key=lambda ep: ep.name)}


def summary(ep: EntryPoint) -> str:
    """The first sentence of the command module's docstring, without its leading command name."""
    try:
        spec = importlib.util.find_spec(ep.module)
        if spec is None or spec.origin is None:
            return ""
        with open(spec.origin, encoding="utf-8") as f:
            doc = ast.get_docstring(ast.parse(f.read())) or ""
    except (ImportError, OSError, SyntaxError, ValueError):
        return ""
    first = " ".join(doc.strip().split("\n\n", 1)[0].split())
    return _COMMAND_PREFIX.sub("", first).split(". ", 1)[0].rstrip(".")


def _usage(found: dict[str, EntryPoint]) -> str:
    lines = ["usage: smetric COMMAND [ARGS...]", "", "commands:"]
    pad = " " * 13
    lines += [
        textwrap.fill(
            summary(ep),
            _WIDTH,
            initial_indent=f"  {name:<10} ",
            subsequent_indent=pad,
            break_on_hyphens=False,
        )
        for name, ep in found.items()
    ]
    if not found:
        lines.append("  (none installed: `pip install -e .` registers the smetric.commands entry points)")
    lines.append("\n`smetric COMMAND --help` shows a command's options.")
    return "\n".join(lines)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    found = commands()
    if not args or args[0] in ("-h", "--help"):
        print(_usage(found))
        return 0 if args else 2
    if args[0] == "--version":  # as smetric.core.version (not imported: this CLI loads no smetric module)
        try:
            print(f"smetric {version('smetric')}")
        except PackageNotFoundError:
            print("smetric unknown (not installed: pip install -e .)")
        return 0
    name, rest = args[0], args[1:]
    if name not in found:
        print(f"smetric: unknown command {name!r}\n\n{_usage(found)}", file=sys.stderr)
        return 2
    command: Callable[[list[str]], int] = found[name].load()
    return command(rest)


if __name__ == "__main__":
    raise SystemExit(main())
