"""Wiring: config -> routers -> :class:`Picker`; the grpc.aio servers (ext_proc, health)."""

from __future__ import annotations

from collections.abc import Callable

import grpc
from envoy.service.ext_proc.v3 import external_processor_pb2_grpc as ep_grpc
from grpc_health.v1 import health_pb2_grpc

from smetric.core.costmodel import CostModel
from smetric.epp.config import PickerConfig, with_mode
from smetric.epp.contracts import EndpointSource, PoolIndex
from smetric.epp.obs.health import HealthReporter
from smetric.epp.server.affinity import ResponseAffinity
from smetric.epp.server.decide import Picker, Saturation
from smetric.epp.server.outlier import OutlierDetector
from smetric.epp.server.servicer import ExtProcServicer
from smetric.epp.server.tier_facts import build_tier_facts
from smetric.policy import PolicyParams
from smetric.policy.flowcontrol import FlowGate
from smetric.policy.framework import Router
from smetric.policy.registry import make_policy, uses_node_facts
from smetric.policy.selective_pd import PdDecider

MAX_FALLBACKS = 4  # keeps the destination list short (header and metadata; --destination-list)


def build_picker(
    cfg: PickerConfig,
    params: PolicyParams,
    source: EndpointSource,
    index: PoolIndex,
    *,
    staleness_s: float = 2.0,
    cost_model: CostModel | None = None,
    is_stale: Callable[[str], bool] | None = None,
    on_dispatch: Callable[[str], None] | None = None,
    succeeds: Picker | None = None,
    response_affinity_entries: int = 0,
    outliers: OutlierDetector | None = None,
) -> Picker:
    """One :class:`Picker` from the config. Each call makes fresh policy instances (own counters).
    ``is_stale``: the source's own staleness judgement (the datastore's), else the scrape age.
    ``succeeds``: the picker this one replaces (a reloaded config): its dispatch ledger (the
    requests in flight), learned prefill speeds, Responses follow-up map and outlier detector (the
    endpoints it has ejected) carry over; ``response_affinity_entries`` and ``outliers`` then go
    unused."""
    router = Router(make_policy(cfg.policy.name, params), MAX_FALLBACKS)
    pd_router = None
    if cfg.pdDisaggregation.enabled:
        pd_router = Router(make_policy(cfg.policy.name, with_mode(params, "disaggregated")), MAX_FALLBACKS)
    picker = Picker(
        source,
        index,
        router,
        cost_model or params.cost_model,
        pd_router=pd_router,
        ledger=succeeds.ledger if succeeds is not None else None,
        rates=succeeds.rates if succeeds is not None else None,
        saturation=Saturation(cfg.saturation.queueDepthThreshold, cfg.saturation.kvCacheUtilThreshold),
        staleness_s=staleness_s,
        global_fetch_s_per_token=params.global_fetch_s_per_token,
        is_stale=is_stale,
        pd_decider=PdDecider(cfg.pdDisaggregation.nonCachedTokens),
        on_dispatch=on_dispatch,
        responses=(
            succeeds.responses
            if succeeds is not None
            else ResponseAffinity(response_affinity_entries)
            if response_affinity_entries > 0
            else None
        ),
        outliers=succeeds.outliers if succeeds is not None else outliers,
        flow_gate=FlowGate(cfg.flowControl.config(), params) if cfg.flowControl.enabled else None,
    )
    node_facts = uses_node_facts(cfg.policy.name)
    # With a global tier every policy's snapshots carry g from the one tier model: the flow gate's TTFT
    # estimate and the ledger's charge are the framework's, whatever the policy's rule reads (a baseline
    # given the session's previous turn instead was judged on a g that a shed turn never wrote,
    # docs/overload.md 8e). Without a tier only a policy that reads nodes and footprint needs them.
    if node_facts or params.global_fetch_s_per_token is not None:
        picker.tier_facts = build_tier_facts(index, params, picker.clock, node_facts=node_facts)
    return picker


# The gateway PINGs the picker's connection to detect a stopped picker (Envoy
# ``connection_keepalive``, 1 s in the rendered configs). gRPC's server defaults accept a PING
# without data at most every 5 minutes and close the connection with GOAWAY "too_many_pings" after
# two early ones: a request whose engine is quiet for more than ~4 s (every long prefill) lost its
# ext_proc stream and the client got a 500. Accept PINGs at any rate, with or without calls.
KEEPALIVE_SERVER_OPTIONS: tuple[tuple[str, int], ...] = (
    ("grpc.http2.min_ping_interval_without_data_ms", 100),
    ("grpc.http2.max_ping_strikes", 0),
    ("grpc.keepalive_permit_without_calls", 1),
)


class PickerServer:
    """The ext_proc server (h2c) and, on its own port, grpc.health.v1."""

    def __init__(
        self,
        servicer: ExtProcServicer,
        health: HealthReporter | None = None,
        *,
        host: str = "127.0.0.1",
        grpc_port: int = 9002,
        health_port: int | None = 9003,
        tls_key_pair: tuple[bytes, bytes] | None = None,
        max_message_bytes: int = 17 * 1024 * 1024,
        max_send_message_bytes: int = -1,
        health_on_grpc_port: bool = False,
    ) -> None:
        """``max_message_bytes``: the largest ext_proc message accepted (Envoy sends a BUFFERED body
        as one message; FULL_DUPLEX_STREAMED chunks are much smaller); the health server takes 64 KiB."""
        self.max_message_bytes = max_message_bytes
        self.max_send_message_bytes = max_send_message_bytes  # -1: gRPC's default, no limit
        self.servicer = servicer
        self.tls_key_pair = tls_key_pair  # (key PEM, cert PEM): ext_proc over TLS; None = h2c
        self.health = health
        self.host = host
        self.grpc_port = grpc_port
        self.health_port = health_port
        self.health_on_grpc_port = health_on_grpc_port  # --health-checking: upstream serves both
        self._server: grpc.aio.Server | None = None
        self._health_server: grpc.aio.Server | None = None

    async def start(self) -> None:
        """Bind and serve; a port of 0 is replaced by the bound port. A taken port raises ``RuntimeError``."""
        options = [
            ("grpc.so_reuseport", 0),
            ("grpc.max_receive_message_length", self.max_message_bytes),
            ("grpc.max_send_message_length", self.max_send_message_bytes),
            *KEEPALIVE_SERVER_OPTIONS,
        ]
        server = grpc.aio.server(options=options)
        ep_grpc.add_ExternalProcessorServicer_to_server(self.servicer, server)
        if self.health is not None and self.health_on_grpc_port:
            health_pb2_grpc.add_HealthServicer_to_server(self.health.servicer, server)
        self.grpc_port = _bind(server, self.host, self.grpc_port, self.tls_key_pair)
        if self.health is not None and self.health_port is not None:
            hs = grpc.aio.server(
                options=[("grpc.so_reuseport", 0), ("grpc.max_receive_message_length", 65536)]
            )
            health_pb2_grpc.add_HealthServicer_to_server(self.health.servicer, hs)
            self.health_port = _bind(hs, self.host, self.health_port)
            await self.health.refresh()
            await hs.start()
            self.health.start()
            self._health_server = hs
        await server.start()
        self._server = server

    async def stop(self, grace_s: float = 5.0) -> None:
        """Report NOT_SERVING, stop accepting, let open streams finish within ``grace_s``."""
        if self.health is not None:
            await self.health.drain()
        if self._server is not None:
            await self._server.stop(grace_s)
            self._server = None
        if self._health_server is not None:
            await self._health_server.stop(0)
            self._health_server = None
        await self.servicer.offload.close()


def _bind(
    server: grpc.aio.Server, host: str, port: int, tls_key_pair: tuple[bytes, bytes] | None = None
) -> int:
    try:
        if tls_key_pair is None:
            bound = server.add_insecure_port(f"{host}:{port}")
        else:
            credentials = grpc.ssl_server_credentials([tls_key_pair])
            bound = server.add_secure_port(f"{host}:{port}", credentials)
    except RuntimeError as exc:
        raise RuntimeError(f"cannot listen on {host}:{port}: {exc}") from None
    if bound == 0:
        raise RuntimeError(f"cannot listen on {host}:{port} (port in use?)")
    return int(bound)
