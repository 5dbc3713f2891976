"""The picker's typed settings: built once from the parsed flags, then passed instead of them.

:func:`smetric.core.pickerflags.build_parser` parses the command line (the flag table the
operator renders too); :meth:`PickerSettings.from_flags` turns the ``argparse.Namespace`` into
this frozen object, with durations in seconds. Nothing after ``main`` sees the namespace. A
setting's default lives only in the flag table: the fields here have none, and
:meth:`PickerSettings.defaults` is the table's defaults; the servicer's settings
(:class:`smetric.epp.server.servicer.ServicerSettings`) are built from these.
"""

from __future__ import annotations

import argparse
from collections.abc import Sequence
from dataclasses import dataclass, replace

from smetric.core.pickerflags import DRAIN_TIMEOUT_S, POOL_GAUGE_INTERVAL_S, build_parser
from smetric.epp.server.outlier import OutlierSettings
from smetric.epp.upstream.flags import resolve as resolve_upstream
from smetric.policy.pickerconfig import PrefixIndexSection


def resolve_prefix_index(flag: str, tokenizer: str) -> str:
    """``--prefix-index auto``: precise when the engines' tokenizer is configured (without it the
    picker's hashes cannot match their KV events), else approximate; other values as given."""
    if flag == "auto":
        return "precise" if tokenizer else "approximate"
    return flag


@dataclass(frozen=True, slots=True)
class PickerSettings:
    """What the running picker reads of its flags (the flag table has the defaults and help)."""

    config: str  # policy config YAML path ("" = defaults)
    # endpoints: standalone list (or @FILE), else a Kubernetes InferencePool
    endpoints: str
    pool_name: str
    pool_namespace: str
    # data sources
    prefix_index: str  # approximate | precise
    tokenizer: str
    kv_events_port: int
    kv_events_max_message_bytes: int
    hash_seed: str
    hash_algo: str
    block_size: int  # tokens per engine KV block (vLLM's --block-size)
    refresh_interval_s: float
    staleness_s: float
    scrape_timeout_s: float
    scrape_max_bytes: int
    max_requests_per_scrape: int
    outlier: OutlierSettings  # passive outlier detection (--outlier-*)
    # request path bounds
    max_body_bytes: int
    body_budget_bytes: int
    parse_processes: int
    max_inflight_decisions: int
    decision_budget_s: float
    response_observer: bool  # --response-path=observer
    # listeners
    bind_address: str
    grpc_port: int
    grpc_health_port: int
    metrics_port: int
    secure_serving: bool
    cert_path: str
    # replica state (approximate index)
    state_file: str
    state_interval_s: float
    snapshot_port: int
    peers: tuple[str, ...]
    response_affinity_entries: int  # Responses follow-up map (0 = off)
    # upstream picker flags (smetric.epp.upstream.flags)
    config_text: str
    leader_election: bool
    metrics_auth: bool
    health_checking: bool  # grpc.health.v1 on the ext_proc port too
    subset_filter: bool  # honour x-gateway-destination-endpoint-subset
    destination_list: str  # all | primary: the fallbacks in the routing header and metadata or not
    pool_gauge_interval_s: float
    drain_timeout_s: float  # open streams' grace after SIGTERM
    grpc_max_recv_bytes: int  # largest ext_proc message received
    grpc_max_send_bytes: int  # largest ext_proc message sent; -1 = gRPC's default, no limit

    def with_config_index(self, section: PrefixIndexSection | None) -> PickerSettings:
        """The config's ``prefixIndex`` over the index flags: its mode, block size and hash seed
        where set; the tokenizer of ``--tokenizer`` when given (a local copy of the same model),
        else the config's. A precise index without a tokenizer is a ``ValueError``, never a
        quiet approximate one."""
        if section is None:
            return self
        tokenizer = self.tokenizer or section.tokenizer
        if section.mode == "precise" and not tokenizer:
            raise ValueError(
                "config prefixIndex: mode precise needs the engines' tokenizer (prefixIndex.tokenizer, an "
                "upstream token-producer's modelName, or --tokenizer)"
            )
        return replace(
            self,
            prefix_index=section.mode,
            tokenizer=tokenizer,
            block_size=section.blockSize or self.block_size,
            hash_seed=self.hash_seed if section.hashSeed is None else section.hashSeed,
        )

    @classmethod
    def from_flags(cls, args: argparse.Namespace) -> PickerSettings:
        """Raises ``ValueError`` listing the refused upstream flags."""
        up = resolve_upstream(args)
        if up.errors:
            raise ValueError("; ".join(up.errors))
        return cls(
            config=args.config,
            endpoints=args.endpoints,
            pool_name=args.pool_name,
            pool_namespace=args.pool_namespace,
            prefix_index=resolve_prefix_index(args.prefix_index, args.tokenizer),
            tokenizer=args.tokenizer,
            kv_events_port=args.kv_events_port,
            kv_events_max_message_bytes=args.kv_events_max_message_bytes,
            hash_seed=args.hash_seed,
            hash_algo=args.hash_algo,
            block_size=args.block_size,
            refresh_interval_s=up.refresh_interval_s or args.refresh_interval_ms / 1000.0,
            staleness_s=up.staleness_s or args.staleness_threshold_ms / 1000.0,
            scrape_timeout_s=args.scrape_timeout_ms / 1000.0,
            scrape_max_bytes=args.scrape_max_bytes,
            max_requests_per_scrape=args.max_requests_per_scrape,
            outlier=OutlierSettings(
                consecutive_errors=args.outlier_consecutive_errors,
                base_ejection_s=args.outlier_ejection_ms / 1000.0,
                max_ejection_s=args.outlier_max_ejection_ms / 1000.0,
            ),
            max_body_bytes=args.max_body_bytes,
            body_budget_bytes=args.body_budget_bytes,
            parse_processes=args.parse_processes,
            max_inflight_decisions=args.max_inflight_decisions,
            decision_budget_s=args.decision_budget_ms / 1000.0,
            response_observer=args.response_path == "observer",
            bind_address=args.bind_address,
            grpc_port=args.grpc_port,
            grpc_health_port=args.grpc_health_port,
            metrics_port=args.metrics_port,
            secure_serving=args.secure_serving,
            cert_path=args.cert_path,
            state_file=args.state_file,
            state_interval_s=args.state_interval_ms / 1000.0,
            snapshot_port=args.snapshot_port,
            peers=tuple(p.strip() for p in args.peers.split(",") if p.strip()),
            response_affinity_entries=args.response_affinity_entries,
            config_text=args.config_text,
            leader_election=args.ha_enable_leader_election,
            metrics_auth=up.metrics_auth,
            health_checking=args.health_checking,
            subset_filter=not args.disable_endpoint_subset_filter,
            destination_list=args.destination_list,
            pool_gauge_interval_s=up.pool_gauge_interval_s or POOL_GAUGE_INTERVAL_S,
            drain_timeout_s=DRAIN_TIMEOUT_S if up.drain_timeout_s is None else up.drain_timeout_s,
            # BUFFERED: the whole body arrives in one message
            grpc_max_recv_bytes=up.grpc_max_recv_bytes or args.max_body_bytes + 1024 * 1024,
            grpc_max_send_bytes=-1 if up.grpc_max_send_bytes is None else up.grpc_max_send_bytes,
        )

    @classmethod
    def from_argv(cls, argv: Sequence[str]) -> PickerSettings:
        """Parse ``argv`` with the picker's flag table (tests and tools)."""
        return cls.from_flags(build_parser().parse_args(list(argv)))

    @classmethod
    def defaults(cls) -> PickerSettings:
        """Every setting at the flag table's default (the only place a default is written)."""
        return cls.from_argv([])
