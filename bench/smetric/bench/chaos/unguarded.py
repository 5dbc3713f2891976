"""``python -m smetric.bench.chaos.unguarded PATCH[,PATCH...] -- PICKER-FLAGS...``: the picker
(``smetric epp``) with guards switched off that have no flag, for ``smetric chaos --guard-off``.

Each patch replaces one guard by what the code would do without it, in this process only; the
production code has no switch for them. A patch name is what :class:`~smetric.bench.chaos.guards.Guard`
lists in ``picker_patches``.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from types import MappingProxyType
from typing import Any

PARSE_WORKER = "--parse-worker"  # argv[1] of a patched picker's parse worker (instead of "--")


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


def _admit_at_headers() -> None:
    """Count a request against the admission limit from its headers (uploads in progress fill it)."""
    from smetric.epp.server.servicer import ExtProcServicer
    from smetric.epp.server.stream import StreamState

    handle = ExtProcServicer._request_headers

    def admit_early(self: ExtProcServicer, st: StreamState, m: Any) -> Any:
        self._admit(st)
        try:
            return handle(self, st, m)
        except BaseException:
            self._leave(st)
            raise

    ExtProcServicer._request_headers = admit_early  # type: ignore[method-assign]
    ExtProcServicer._admit = _admit_once(ExtProcServicer._admit)  # type: ignore[method-assign]


def _admit_once(admit: Any) -> Any:
    def once(self: Any, st: Any) -> None:
        if not st.counted:
            admit(self, st)

    return once


def _all_paths() -> None:
    """The picker routes every path (its own allow-list check always passes)."""
    from smetric.epp.server import servicer

    def allow(path: str, allowed: tuple[str, ...] = ()) -> bool:
        return True

    servicer.path_allowed = allow


def _kv_no_reconnect() -> None:
    """The KV-event subscriber never replaces a dropped connection (libzmq's behaviour alone)."""
    from smetric.epp.kvevents import subscriber

    subscriber.RECONNECT_ON = 0


def _whole_prompt_key() -> None:
    """The precise index tokenizes a prompt in one piece, and a parsed body keeps its document (on
    the parse threads); the parse worker processes run with the same patch."""
    from smetric.epp.index import precise
    from smetric.epp.parse.body import parse_body
    from smetric.epp.server import offload, parseworker

    def parse_and_key(body: bytes | bytearray, path: str, keyer: offload.Keyer) -> Any:
        parsed = parse_body(body, path)
        return (parsed, *keyer(parsed))

    precise.ENCODE_CHUNK_CHARS = 1 << 62
    offload._parse_and_key = parse_and_key
    init = parseworker.WorkerPool.__init__

    def patched_workers(self: parseworker.WorkerPool, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        recipe = self._argv[-1]
        self._argv = [
            sys.executable,
            "-m",
            "smetric.bench.chaos.unguarded",
            "whole-prompt-key",
            PARSE_WORKER,
            recipe,
        ]

    parseworker.WorkerPool.__init__ = patched_workers  # type: ignore[method-assign]


def _kv_store_uncapped() -> None:
    """The KV block store keeps every stored block (no per-endpoint cap)."""
    from smetric.epp.kvevents.store import BlockStore

    def uncapped(self: BlockStore, address: str) -> int:
        return sys.maxsize

    BlockStore.max_blocks = uncapped  # type: ignore[method-assign]


def _kv_no_sequence_check() -> None:
    """The KV-event subscriber takes every batch as the next one (lost batches go unnoticed)."""
    from smetric.epp.kvevents.subscriber import SequenceTracker

    def in_order(self: SequenceTracker, seq: int) -> bool:
        self.last = seq
        return True

    SequenceTracker.observe = in_order  # type: ignore[method-assign]


def _scrape_unchecked() -> None:
    """A /metrics page the picker cannot read (not Prometheus text, no vLLM series, a NaN) counts
    as an idle engine's page instead of making the endpoint stale."""
    from smetric.epp.contracts import EngineMetrics
    from smetric.epp.scrape import scraper
    from smetric.epp.scrape.parse import CacheConfig, MetricsParseError, ParsedMetrics, parse_vllm_metrics

    def lenient(text: str | bytes, scraped_at_s: float, memo: Any = None) -> ParsedMetrics:
        try:
            return parse_vllm_metrics(text, scraped_at_s, memo)
        except MetricsParseError:
            idle = EngineMetrics(0, 0, 0.0, 0, 0, 0.0, 0.0, scraped_at_s)
            return ParsedMetrics(idle, CacheConfig())

    scraper.parse_vllm_metrics = lenient


def _unchecked_bodies() -> None:
    """Bodies are not checked: content nests without a depth limit, and a body the picker cannot
    read (not JSON, not an API's shape) is routed by load alone, as a request without a body."""
    from smetric.epp.parse import body
    from smetric.epp.parse.errors import RequestError
    from smetric.epp.server import servicer

    def unchecked(doc: bytes | bytearray | memoryview, path: str = "") -> body.ParsedBody | None:
        try:
            return body.parse_body(doc, path)
        except RequestError:
            return None

    body.MAX_CONTENT_DEPTH = sys.maxsize
    servicer.parse_body = unchecked  # type: ignore[assignment]


def _stale_as_fresh() -> None:
    """An endpoint with metrics counts as fresh: neither a failed scrape nor old metrics mark it
    stale, so the policies see a dead or frozen engine with its last scraped gauges."""
    from smetric.epp.datastore import Datastore

    def fresh(self: Datastore, address: str) -> bool:
        return False

    Datastore.is_stale = fresh  # type: ignore[method-assign]


def _unfair_body_budget() -> None:
    """One cap on all buffered bodies together: large bodies may take the whole budget, and one
    connection any share of it."""
    from smetric.epp.server.guard import BodyBudget
    from smetric.epp.server.servicer import ExtProcServicer

    init = ExtProcServicer.__init__

    def unfair(self: ExtProcServicer, *args: Any, **kwargs: Any) -> None:
        init(self, *args, **kwargs)
        limit = self.settings.body_budget_bytes
        self.budget = BodyBudget(limit, large_share=1.0, client_large_bytes=limit)

    ExtProcServicer.__init__ = unfair  # type: ignore[method-assign]


def _no_flow_control() -> None:
    """The picker builds no flow-control gate whatever its config says: every request is
    dispatched at once, as with ``flowControl.enabled: false``."""
    from smetric.epp.server import app

    def no_gate(*args: Any, **kwargs: Any) -> None:
        return None

    app.FlowGate = no_gate  # type: ignore[assignment,misc]


PATCHES: Mapping[str, Callable[[], None]] = MappingProxyType(
    {
        "no-flow-control": _no_flow_control,
        "kv-no-reconnect": _kv_no_reconnect,
        "whole-prompt-key": _whole_prompt_key,
        "ledger-client-id": _ledger_client_id,
        "grpc-default-ping-policy": _grpc_default_ping_policy,
        "all-paths": _all_paths,
        "admit-at-headers": _admit_at_headers,
        "kv-store-uncapped": _kv_store_uncapped,
        "kv-no-sequence-check": _kv_no_sequence_check,
        "scrape-unchecked": _scrape_unchecked,
        "unchecked-bodies": _unchecked_bodies,
        "stale-as-fresh": _stale_as_fresh,
        "unfair-body-budget": _unfair_body_budget,
    }
)


def main(argv: Sequence[str] | None = None) -> int:
    args = list(sys.argv[1:] if argv is None else argv)
    if len(args) < 2 or args[1] not in ("--", PARSE_WORKER):
        print(__doc__.split("\n\n")[0], file=sys.stderr)
        return 2
    names = [n for n in args[0].split(",") if n]
    unknown = [n for n in names if n not in PATCHES]
    if unknown:
        print(f"chaos.unguarded: unknown patch(es) {unknown}; known: {sorted(PATCHES)}", file=sys.stderr)
        return 2
    for n in names:
        PATCHES[n]()
    if args[1] == PARSE_WORKER:  # a parse worker process of a patched picker
        from smetric.epp.server import parseworker

        parseworker.main(args[2:])
        return 0
    from smetric.epp.main import main as epp_main

    return epp_main(args[2:])


if __name__ == "__main__":
    raise SystemExit(main())
