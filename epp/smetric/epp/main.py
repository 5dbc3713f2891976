"""``smetric-epp`` (also ``smetric epp``): run the endpoint picker. Flags -> config -> datastore ->
servicer -> grpc.aio servers.

Exit codes: 0 after a clean shutdown (SIGTERM / SIGINT), 2 for bad flags or config, 1 when a
server cannot start (port taken, discovery failure).
"""

from __future__ import annotations

import asyncio
import gc
import logging
import os
import signal
import sys
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING

from prometheus_client import CollectorRegistry, start_http_server

from smetric.core.outputs import check_writable
from smetric.core.pickerflags import build_parser, ignored_upstream_flags
from smetric.core.tokenizer import TokenizerLoadError
from smetric.epp.config import (
    ConfigError,
    LoadedConfig,
    PickerConfig,
    load_config,
    load_picker_config,
    policy_params,
)
from smetric.epp.obs.health import HealthReporter
from smetric.epp.obs.labels import ModelLabels
from smetric.epp.obs.logging import (
    configure_logging,
    level_from_verbosity,
    set_decision_log,
    toggle_decision_log,
    use_console_encoder,
)
from smetric.epp.obs.metrics import KvEventGapCounter, PickerMetrics
from smetric.epp.reload import ConfigReloader
from smetric.epp.server.affinity import ResponseAffinity
from smetric.epp.server.app import PickerServer, build_picker
from smetric.epp.server.keyrecipe import KeyRecipe
from smetric.epp.server.outlier import OutlierDetector
from smetric.epp.server.servicer import ExtProcServicer, ServicerSettings
from smetric.epp.server.snapshot import StateKeeper
from smetric.epp.server.tls import TlsError, server_key_pair
from smetric.epp.settings import PickerSettings
from smetric.epp.upstream.flags import resolve as resolve_upstream

if TYPE_CHECKING:  # Kubernetes clients are imported where used: a standalone picker starts without them
    from smetric.epp.datastore import Datastore
    from smetric.epp.leader import LeaderElector
    from smetric.epp.obs.metrics_server import MetricsServer

log = logging.getLogger("smetric.epp")


@dataclass(frozen=True, slots=True)
class _Parts:
    """What :func:`serve` runs: built by :func:`build_parts`, nothing started yet."""

    settings: PickerSettings
    cfg: PickerConfig
    registry: CollectorRegistry
    datastore: Datastore
    server: PickerServer
    elector: LeaderElector | None
    keeper: StateKeeper | None
    reloader: ConfigReloader | None
    metrics_server: MetricsServer | None


async def serve(settings: PickerSettings, cfg: PickerConfig | None = None) -> int:
    """Build the picker, start it, serve until SIGTERM/SIGINT, then shut it down. 0 after a clean
    shutdown, 1 when a server cannot start."""
    if cfg is None:
        cfg = load_config(settings.config, settings.config_text)
    parts = build_parts(settings, cfg)
    stop = stop_on_signals()
    await parts.datastore.start()
    if parts.elector is not None:
        parts.elector.start()
    try:
        await start_serving(parts)
        await stop.wait()
        log.info("shutting down", extra={"grace_s": settings.drain_timeout_s})
    except (OSError, RuntimeError) as exc:
        log.error("cannot start: %s", exc)
        return 1
    finally:
        await shut_down(parts)
    return 0


def build_parts(s: PickerSettings, cfg: PickerConfig) -> _Parts:
    """The datastore, the picker and its servicer, the gRPC servers and the optional parts (leader
    election, state keeper, config reloader, authenticated metrics), wired together."""
    from smetric.epp.datastore import build_datastore

    params = policy_params(cfg)
    registry = CollectorRegistry()
    models = ModelLabels(cfg.servedModels)  # the model label: served models (else /v1/models) + "other"
    # the pool's namespace labels scheduling attempts (none with --endpoints: no pods)
    metrics = PickerMetrics(registry, s.pool_name, models, s.pool_namespace if s.pool_name else "")
    datastore = build_datastore(s, KvEventGapCounter(metrics).on_gap)
    models.discover_from(datastore.serves)
    picker = build_picker(
        cfg,
        params,
        datastore,
        datastore.index,
        staleness_s=s.staleness_s,
        is_stale=datastore.is_stale,
        on_dispatch=datastore.dispatched,
        response_affinity_entries=s.response_affinity_entries,
        outliers=OutlierDetector(s.outlier),
    )
    renderer = None
    if s.prefix_index == "precise":  # the index must see the text the engines tokenize
        from smetric.core.tokenizer import load_tokenizer

        renderer = load_tokenizer(s.tokenizer)
    servicer = ExtProcServicer(
        picker,
        metrics,
        ServicerSettings.from_picker(s, cfg.servedModels, cfg.sessionHeaders),
        renderer=renderer,
        key_recipe=KeyRecipe.of(s),
    )
    # a removed pod's learned speed goes with it (from the picker in use: a reload replaces it)
    datastore.on_removed(lambda address: servicer.picker.on_endpoint_removed(address))
    datastore.on_removed(metrics.forget_endpoint)  # and its per-endpoint series
    elector = leader_elector(s)
    health = HealthReporter(
        datastore,
        metrics,
        datastore.is_stale,
        interval_s=s.pool_gauge_interval_s,
        synced=datastore.synced,
        is_leader=None if elector is None else (lambda: elector.is_leader),
    )
    server = PickerServer(
        servicer,
        health,
        host=s.bind_address,
        grpc_port=s.grpc_port,
        health_port=s.grpc_health_port,
        tls_key_pair=server_key_pair(s.secure_serving, s.cert_path),
        max_message_bytes=s.grpc_max_recv_bytes,
        max_send_message_bytes=s.grpc_max_send_bytes,
        health_on_grpc_port=s.health_checking,
    )
    keeper = state_keeper(s, datastore.index, picker.responses)
    if keeper is not None and keeper.peers and picker.responses is not None:
        servicer.peer_lookup = keeper.ask_peers  # a follow-up that beat the push asks the peers
    return _Parts(
        settings=s,
        cfg=cfg,
        registry=registry,
        datastore=datastore,
        server=server,
        elector=elector,
        keeper=keeper,
        reloader=config_reloader(s, servicer, datastore, models),
        metrics_server=authenticated_metrics(s, registry),
    )


def stop_on_signals() -> asyncio.Event:
    """Set on SIGTERM or SIGINT; SIGUSR1 toggles the decision log."""
    stop = asyncio.Event()
    loop = asyncio.get_running_loop()
    for sig in (signal.SIGTERM, signal.SIGINT):
        loop.add_signal_handler(sig, stop.set)
    loop.add_signal_handler(signal.SIGUSR1, toggle_decision_log)
    return stop


async def start_serving(parts: _Parts) -> None:
    """Start what serves, once discovery runs: the restored state first (the first decisions are
    already warm), the metrics endpoint, the gRPC servers, the config reloader."""
    s, keeper = parts.settings, parts.keeper
    if keeper is not None:
        await keeper.restore()
        await keeper.start()
    if parts.metrics_server is None:
        start_http_server(s.metrics_port, addr=s.bind_address, registry=parts.registry)
    else:
        await parts.metrics_server.start()
    await parts.server.start()
    if parts.reloader is not None:
        parts.reloader.start()
    settle_gc()
    log.info(
        "picker serving",
        extra={
            "policy": parts.cfg.policy.name,
            "pd": parts.cfg.pdDisaggregation.enabled,
            "grpc_port": parts.server.grpc_port,
            "health_port": parts.server.health_port,
            "metrics_port": s.metrics_port,
            "tls": s.secure_serving,
        },
    )


async def shut_down(parts: _Parts) -> None:
    """Stop every part, what a standby or the state needs first: the Lease is released (a standby
    takes over while this one drains), the servers drain, then the final state snapshot."""
    if parts.elector is not None:
        await parts.elector.stop(release=True)
    if parts.reloader is not None:
        await parts.reloader.stop()
    await parts.server.stop(parts.settings.drain_timeout_s)
    if parts.keeper is not None:
        await parts.keeper.stop()  # the final snapshot, after the last decision
    await parts.datastore.stop()
    metrics_server = parts.metrics_server
    if metrics_server is not None:
        await metrics_server.stop()
        from smetric.epp.obs.metrics_server import KubeAuthorizer

        if isinstance(metrics_server.authorizer, KubeAuthorizer):
            await metrics_server.authorizer.close()


def config_reloader(
    settings: PickerSettings, servicer: ExtProcServicer, datastore: Datastore, models: ModelLabels
) -> ConfigReloader | None:
    """``--config-file``: a changed file is validated and replaces the policy, P/D, saturation and
    served models for new requests; the ledger and learned speeds carry over (reload.py)."""
    s = settings
    if not s.config:
        return None

    def apply(loaded: LoadedConfig) -> None:
        cfg = loaded.config
        picker = build_picker(
            cfg,
            policy_params(cfg),
            datastore,
            datastore.index,
            staleness_s=s.staleness_s,
            is_stale=datastore.is_stale,
            on_dispatch=datastore.dispatched,
            succeeds=servicer.picker,
        )
        servicer.use_picker(picker, cfg.servedModels, cfg.sessionHeaders)
        models.configure(cfg.servedModels)
        if cfg.prefixIndex is not None and cfg.prefixIndex.mode != s.prefix_index:
            log.warning(
                "config: prefixIndex %s needs a restart; the running %s index is kept",
                cfg.prefixIndex.mode,
                s.prefix_index,
            )

    return ConfigReloader(s.config, apply)


def leader_elector(settings: PickerSettings) -> LeaderElector | None:
    """``--ha-enable-leader-election``: a Lease in the pool's namespace, named as llm-d-router's."""
    if not settings.leader_election:
        return None
    from smetric.epp.discovery.kubernetes import default_api_client
    from smetric.epp.leader import LeaderElector, lease_name

    name = lease_name(settings.pool_namespace, settings.pool_name)
    return LeaderElector(default_api_client, settings.pool_namespace, name)


def authenticated_metrics(settings: PickerSettings, registry: CollectorRegistry) -> MetricsServer | None:
    """``--metrics-endpoint-auth``: metrics behind a TokenReview + SubjectAccessReview (Kubernetes
    mode); ``None``: the unauthenticated exporter (prometheus_client's, on its own thread)."""
    if not settings.metrics_auth:
        return None
    from smetric.epp.discovery.kubernetes import default_api_client
    from smetric.epp.obs.metrics_server import KubeAuthorizer, MetricsServer

    authorizer = KubeAuthorizer(default_api_client)
    return MetricsServer(registry, settings.bind_address, settings.metrics_port, authorizer)


def state_keeper(
    settings: PickerSettings, index: object, responses: ResponseAffinity | None = None
) -> StateKeeper | None:
    """``--state-file`` / ``--snapshot-port`` / ``--peers``, for either prefix index (and the
    Responses follow-up map with it)."""
    from smetric.epp.index.approximate import ApproximateIndex
    from smetric.epp.index.precise import PreciseIndex

    s = settings
    wanted = s.state_file or s.snapshot_port or s.peers
    if not wanted or not isinstance(index, ApproximateIndex | PreciseIndex):
        return None
    return StateKeeper(
        index, s.state_file, s.state_interval_s, s.peers, s.snapshot_port, s.bind_address, responses=responses
    )


def settle_gc() -> None:
    """Collect once and move everything that exists after start-up (modules, config, servers) to
    the permanent generation, so later full collections only walk what requests create: a full
    collection of the start-up heap (~50k objects) stalls the event loop for 11 ms here, 0.0 ms
    after the freeze; the picker's start-up itself ran three of 14-52 ms."""
    gc.collect()
    gc.freeze()


def event_loop_factory(name: str) -> Callable[[], asyncio.AbstractEventLoop] | None:
    """``--event-loop``: uvloop's loop (libuv) or asyncio's (``None``). uvloop cuts the picker's CPU
    per routed request and its latency tail (README section 6); ``auto`` takes it when installed."""
    if name not in ("auto", "uvloop", "asyncio"):
        raise ValueError(f"--event-loop must be auto, uvloop or asyncio, got {name!r}")
    if name == "asyncio":
        return None
    try:
        import uvloop
    except ImportError:
        if name == "uvloop":
            raise ValueError("--event-loop=uvloop but uvloop is not installed (pip install uvloop)") from None
        return None
    factory: Callable[[], asyncio.AbstractEventLoop] = uvloop.new_event_loop
    return factory


def main(argv: Sequence[str] | None = None) -> int:
    args = build_parser().parse_args(list(sys.argv[1:] if argv is None else argv))
    up = resolve_upstream(args)
    level = level_from_verbosity(args.v) if args.v >= 0 else (up.log_level or args.log_level)
    try:
        configure_logging(level)
    except ValueError as exc:
        print(f"smetric-epp: {exc}", file=sys.stderr)
        return 2
    if args.zap_encoder == "console" or args.zap_devel:
        use_console_encoder()
    set_decision_log(args.decision_log or level == "debug")
    if up.errors:
        for error in up.errors:
            print(f"smetric-epp: {error}", file=sys.stderr)
        return 2
    ignored = ignored_upstream_flags(args)
    if ignored:
        log.warning("upstream picker flags without effect here: %s", ", ".join(ignored))
    if not args.endpoints and not args.pool_name:
        print(
            "smetric-epp: either --endpoints (standalone) or --pool-name (Kubernetes) is required",
            file=sys.stderr,
        )
        return 2
    try:
        loaded = load_picker_config(args.config, args.config_text)  # fail fast, before any server starts
        if args.state_file:  # written every --state-interval-ms: a path that cannot be is a config error
            check_writable("--state-file", Path(args.state_file))
        settings = PickerSettings.from_flags(args).with_config_index(loaded.config.prefixIndex)
        loop_factory = event_loop_factory(args.event_loop)
    except (ConfigError, ValueError) as exc:
        print(f"smetric-epp: {exc}", file=sys.stderr)
        return 2
    for warning in loaded.warnings:
        log.warning("config: %s", warning)
    if args.kubeconfig:  # read by the Kubernetes client's kubeconfig loader (discovery, Lease, reviews)
        os.environ["KUBECONFIG"] = args.kubeconfig
    if not settings.metrics_auth:
        log.info("metrics endpoint unauthenticated (--metrics-endpoint-auth=false or standalone mode)")
    try:
        with asyncio.Runner(loop_factory=loop_factory) as runner:
            return runner.run(serve(settings, loaded.config))
    except (ConfigError, ValueError, TlsError, TokenizerLoadError) as exc:
        print(f"smetric-epp: {exc}", file=sys.stderr)
        return 2


if __name__ == "__main__":
    raise SystemExit(main())
