"""``python -m smetric.bench.chaos_unguarded PATCH[,PATCH...] -- PICKER-FLAGS...``: the picker
(``smetric epp``) with guards switched off that have no flag, for ``smetric chaos --guard-off``.

Each patch replaces one guard by what the code would do without it, in this process only; the
production code has no switch for them. A patch name is what :class:`~smetric.bench.chaos_guards.Guard`
lists in ``picker_patches``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType


def _ledger_client_id() -> None:
    """Key the dispatch ledger on the client's x-request-id."""
    from smetric.epp.parse.headers import RequestHeaders
    from smetric.epp.server.servicer import ExtProcServicer

    def client_key(self: ExtProcServicer, headers: RequestHeaders) -> str:
        return headers.request_id

    ExtProcServicer.ledger_key = client_key  # type: ignore[method-assign]


def _grpc_default_ping_policy() -> None:
    """gRPC's default server ping policy (PINGs without data at most every 5 min, 2 strikes)."""
    from smetric.epp.server import app

    app.KEEPALIVE_SERVER_OPTIONS = ()


def _all_paths() -> None:
    """The picker routes every path (its own allow-list check always passes)."""
    from smetric.epp.server import servicer

    def allow(path: str, allowed: tuple[str, ...] = ()) -> bool:
        return True

    servicer.path_allowed = allow


PATCHES: Mapping[str, Callable[[], None]] = MappingProxyType(
    {
        "ledger-client-id": _ledger_client_id,
        "grpc-default-ping-policy": _grpc_default_ping_policy,
        "all-paths": _all_paths,
    }
)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[1] != "--":
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    names = [n for n in args[0].split(",") if n]
    unknown = [n for n in names if n not in PATCHES]
    if unknown:
        print(f"chaos_unguarded: unknown patch(es) {unknown}; known: {sorted(PATCHES)}", file=sys.stderr)
        return 2
    for n in names:
        PATCHES[n]()
    from smetric.epp.main import main as epp_main

    return epp_main(args[2:])


if __name__ == "__main__":
    raise SystemExit(main())
