"""The guards ``smetric chaos`` checks, and how to switch each one off.

Every chaos row names the guard it checks (``Row.guard``). A :class:`Guard` says where that guard
lives and how the chaos stack is built without it, through the same knobs a deployment has: fields
of :class:`~smetric.epp.envoy.EnvoyOptions`, HTTP filters left out of the Envoy bootstrap, picker
or emulator flags; where no knob exists, a patch applied inside the picker process by
:mod:`smetric.bench.chaos.unguarded` (the production code keeps no test-only switch).

``smetric chaos --guard-off NAME`` runs the faults that check ``NAME`` on a stack without it, and
``tests/integration/chaos/test_chaos_guards.py`` asserts that every row naming the guard then FAILS: a
row that still passes with its guard off does not check that guard. Adding a guard is one entry in
:data:`GUARDS` (or in a module's own tuple that ``chaos.py`` concatenates).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from dataclasses import dataclass, replace
from typing import Any


@dataclass(frozen=True, slots=True)
class Guard:
    """``name``: what rows put in ``Row.guard``; ``faults``: the fault functions (``__name__``)
    whose rows check it. The remaining fields say how the stack is built with the guard off."""

    name: str
    what: str
    faults: tuple[str, ...]
    envoy: tuple[tuple[str, Any], ...] = ()  # EnvoyOptions fields replaced
    drop_filters: tuple[str, ...] = ()  # HTTP filters (by name) left out of every listener
    picker_flags: tuple[str, ...] = ()  # appended to the picker's argv (a later flag wins)
    picker_patches: tuple[str, ...] = ()  # chaos.unguarded.PATCHES applied in the picker process
    emulator_flags: tuple[str, ...] = ()  # appended to every emulated engine's argv


# Row guard names used by more than one row or module.
SCRUB = "gateway header scrub"
LEDGER_KEY = "ledger keyed on the picker's own request id"
PATHS = "inference path allow-list"
PICKER_PINGS = "picker accepts the gateway's keepalive PINGs"
GATEWAY_PINGS = "gateway PING keepalive on the picker connection"
IDLE_TIMEOUT = "stream idle timeout"
RETRIES = "gateway retries on the picker's fallbacks"
PER_TRY_IDLE = "per-try idle timeout retries a frozen attempt"
CUT_STREAM = "a cut stream ends with an error the client sees"
STALENESS = "stale endpoints avoided"
REQUEST_CAP = "requests per endpoint between two of its scrapes capped"
ADMISSION = "picker decision budget"
UPLOAD_COUNTING = "admission counts a request once its body is complete"
PROTOCOL_GUARD = "gateway answers refused requests with a status"
UPLOAD_BOUNDS = "gateway upload bounds"
STATE_FILE = "picker state file"
FAIL_CLOSE = "ext_proc fail-closed"
BODY_LIMITS = "request body limits"
SCRAPE_CHECKS = "metrics scrape validation"
KV_STORE_CAP = "KV block store cap"
KV_MESSAGE_LIMIT = "KV-event message limit"
KV_SEQUENCE = "KV-event sequence check"
KV_RECONNECT = "KV subscriber reconnects after a dropped connection"
BODY_BUDGET = "picker body budget"
BODY_FAIRNESS = "large bodies get a bounded share of the body budget"
PARSE_OFFLOAD = "large bodies parsed off the event loop"
# Two guards that each keep new sessions off a frozen engine: its scrapes failing (STALENESS) and
# the ledger charging the requests it holds; with either alone the row can pass.
FROZEN_AVOIDED = "staleness and the ledger keep new sessions off a frozen engine"
PARSE_COST = "bounded cost of a parsed body"
PICKER_RETRY = "gateway fails a dead picker replica over"
NO_GUARD = ""  # a row that measures the whole path (the load row), not one guard

GUARDS: tuple[Guard, ...] = (
    Guard(
        SCRUB,
        "the Lua filter smetric.scrub (envoy/hardening.py) removes the client's routing and x-envoy-* "
        "headers before ext_proc and the router see them",
        ("hostile_headers_and_paths",),
        drop_filters=("smetric.scrub",),
    ),
    Guard(
        LEDGER_KEY,
        "the dispatch ledger is keyed on the picker's own id (servicer.ExtProcServicer.ledger_key), "
        "never on the client's x-request-id",
        ("hostile_headers_and_paths",),
        picker_patches=("ledger-client-id",),
    ),
    Guard(
        PATHS,
        "non-inference paths get 404 at the gateway (smetric.scrub) and again at the picker",
        ("hostile_headers_and_paths",),
        drop_filters=("smetric.scrub",),
        picker_patches=("all-paths",),
    ),
    Guard(
        PICKER_PINGS,
        "the picker's gRPC server accepts PINGs at any rate (server/app.py KEEPALIVE_SERVER_OPTIONS)",
        ("long_prefill",),
        picker_patches=("grpc-default-ping-policy",),
    ),
    Guard(
        GATEWAY_PINGS,
        "Envoy PINGs the picker connection (EnvoyOptions.picker_keepalive_s) and drops it when "
        "a stopped picker does not answer",
        ("picker_stop",),
        envoy=(("picker_keepalive_s", 0.0),),
    ),
    Guard(
        IDLE_TIMEOUT,
        "the gateway's idle bounds (EnvoyOptions.per_try_idle_timeout_s, stream_idle_timeout_s) cut "
        "a stream whose engine went silent",
        ("endpoint_stop",),
        envoy=(("stream_idle_timeout_s", 300.0), ("per_try_idle_timeout_s", 0.0)),
    ),
    Guard(
        PER_TRY_IDLE,
        "an attempt silent for EnvoyOptions.per_try_idle_timeout_s is reset and, before its "
        "response, retried on the picker's next fallback",
        ("endpoint_stop",),
        envoy=(("per_try_idle_timeout_s", 0.0),),
    ),
    Guard(
        PROTOCOL_GUARD,
        "the Lua filter smetric.protocol_guard answers HTTP/1.0 with 426 and oversized headers with "
        "431 (Envoy's codec closes the connection without a status when ext_proc is in the chain)",
        ("protocol_errors",),
        envoy=(("protocol_guard", False),),
    ),
    Guard(
        ADMISSION,
        "the picker answers 503 + retry-after to a request it has not routed within "
        "--decision-budget-ms of its headers (a stalled upload included)",
        ("slow_uploads",),
        picker_flags=("--decision-budget-ms=600000",),
    ),
    Guard(
        UPLOAD_COUNTING,
        "the picker counts a request against --max-inflight-decisions only once its body is complete "
        "(servicer._admit), so held partial uploads cannot shed complete requests",
        ("slow_uploads",),
        picker_patches=("admit-at-headers",),
    ),
    Guard(
        SCRAPE_CHECKS,
        "a /metrics page that is not a vLLM engine's (not Prometheus text, no vllm:num_requests_running, "
        "a NaN or negative value, over --scrape-max-bytes) is refused and its endpoint goes stale "
        "(scrape/parse.py, scrape/http1.py)",
        ("hostile_metrics",),
        picker_flags=("--scrape-max-bytes=1073741824",),
        picker_patches=("scrape-unchecked",),
    ),
    Guard(
        KV_STORE_CAP,
        "the KV block store keeps at most the engine's num_gpu_blocks x 1.25 blocks per endpoint, "
        "least recently stored first out (kvevents/store.py BlockStore.max_blocks)",
        ("kv_events",),
        picker_patches=("kv-store-uncapped",),
    ),
    Guard(
        KV_SEQUENCE,
        "the KV-event subscriber checks each batch's sequence number; a jump is a gap (the endpoint's "
        "blocks are reset and it resynchronises; kvevents/subscriber.py SequenceTracker)",
        ("kv_events",),
        picker_patches=("kv-no-sequence-check",),
    ),
    Guard(
        BODY_LIMITS,
        "the picker answers a body itself when it passes --max-body-bytes (413), nests content more "
        "than 64 levels (400, parse/body.py MAX_CONTENT_DEPTH) or is not a request it can read (400): "
        "no engine sees it",
        ("hostile_bodies",),
        picker_flags=("--max-body-bytes=1073741824",),
        picker_patches=("unchecked-bodies",),
    ),
    Guard(
        BODY_BUDGET,
        "request bodies buffered by all streams together stay within --body-budget-bytes (64 MiB); "
        "past it a request gets 503 (server/guard.py BodyBudget)",
        ("hostile_bodies", "agent_bodies"),
        picker_flags=("--body-budget-bytes=1099511627776",),
    ),
    Guard(
        BODY_FAIRNESS,
        "bodies over 1 MiB together hold at most 3/4 of --body-budget-bytes and one connection at "
        "most one body at --max-body-bytes (server/guard.py BodyBudget, the connection from Envoy's "
        "connection.id attribute), so small bodies always have room",
        ("body_hogs",),
        picker_patches=("unfair-body-budget",),
    ),
    Guard(
        PARSE_OFFLOAD,
        "bodies of 1 MiB or more are parsed and keyed in --parse-processes worker processes "
        "(server/offload.py); off: --parse-processes=0 parses them on two threads of the picker, "
        "where the parse holds the GIL and stalls the event loop",
        ("hostile_bodies",),
        picker_flags=("--parse-processes=0",),
    ),
    Guard(
        REQUEST_CAP,
        "an endpoint sent --max-requests-per-scrape requests since its last successful scrape is "
        "stale until a newer one answers (datastore.Datastore.dispatched / is_stale)",
        ("endpoint_stop_burst",),
        picker_flags=("--max-requests-per-scrape=0",),
    ),
    Guard(
        STALENESS,
        "an endpoint whose last scrape failed or is older than --staleness-threshold-ms is stale "
        "(datastore.is_stale), and the policies see a stale endpoint only when no fresh one is left "
        "(policy/framework.py); switched off together with the outlier detector, which reaches the "
        "policies through the same staleness test and would otherwise keep a killed engine (its refused "
        "connections are errors) out on its own",
        ("endpoint_kill", "endpoint_stop"),
        picker_flags=("--outlier-consecutive-errors=0",),
        picker_patches=("stale-as-fresh",),
    ),
)


def by_name(guards: Iterable[Guard]) -> Mapping[str, Guard]:
    table: dict[str, Guard] = {}
    for g in guards:
        if g.name in table:
            raise ValueError(f"guard {g.name!r} is registered twice")
        table[g.name] = g
    return table


def envoy_options_without(options: Any, off: Iterable[Guard]) -> Any:
    """``options`` (an EnvoyOptions) with the fields the disabled guards replace."""
    for g in off:
        if g.envoy:
            options = replace(options, **dict(g.envoy))
    return options


def drop_http_filters(config: dict[str, Any], names: Iterable[str]) -> dict[str, Any]:
    """Remove the named HTTP filters from every listener of an Envoy bootstrap (in place)."""
    dropped = set(names)
    if not dropped:
        return config
    for listener in config["static_resources"]["listeners"]:
        for chain in listener["filter_chains"]:
            for f in chain["filters"]:
                hcm = f["typed_config"]
                if "http_filters" in hcm:
                    hcm["http_filters"] = [h for h in hcm["http_filters"] if h["name"] not in dropped]
    return config


__all__ = ["GUARDS", "Guard", "by_name", "drop_http_filters", "envoy_options_without"]
