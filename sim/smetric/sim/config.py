"""The simulated cluster's settings (:class:`SimConfig`): instances, preset variant, global path,
router view, policy parameters, arrivals and the measured window. Policy and rate are per run
(:func:`smetric.sim.simulator.simulate`)."""

from __future__ import annotations

import json
from dataclasses import dataclass, replace
from typing import Any

from smetric.core.presets import InstancePreset, get_preset, variant_name
from smetric.engine.global_tier import GlobalPath
from smetric.policy.flowcontrol import FlowControlConfig
from smetric.policy.params import ParamsModel
from smetric.policy.params_mapping import CONTEXT_KEYS, params_from_mapping
from smetric.sim.gateway import ClientRetry
from smetric.sim.view import ROUTER_VIEWS

ARRIVALS = ("agents", "stationary", "cold")
TIER_HITS = ("estimate", "events", "exact")
FRAMEWORK_G = ("tier", "session")


@dataclass(frozen=True, slots=True)
class SimConfig:
    """Cluster and router settings of a run (policy and rate are per run)."""

    instances: int = 32
    mode: str = "colocated"
    preset: str = "qwen3-30b-h20"
    global_tier: str = "full"
    refresh_s: float = 0.05
    window_s: float = 30.0
    nic_gbit_s: float = 200.0
    # Calibrated global path (docs/simulator.md "Global tier", sources there). Per-GPU load
    # throughput LMCache + Mooncake achieve (None = no per-GPU limit: NIC line rate); source-side
    # bandwidth per store node (None = unlimited); lookup latency per admitted request; whether
    # computed KV written to the tier occupies the links; sync = a load stalls the whole batch.
    global_load_gbit_s: float | None = 60.0
    global_store_gbit_s: float | None = 200.0
    global_lookup_s: float = 0.002
    global_write_back: bool = True
    global_load_mode: str = "sync"
    # Where a written block's replica lives and how a same-node load is timed
    # (smetric.engine.global_tier, docs/simulator.md "Node-local path"): "spread" = every load
    # over the NIC (LMCache + Mooncake defaults); "node" = writer node's segment, same-node loads
    # host->GPU over PCIe at global_node_local_gbit_s per GPU.
    global_placement: str = "spread"
    global_node_local_gbit_s: float = 176.8
    # LMCache's write path as pinned (smetric.engine.global_tier.GlobalPath has the lines): whole
    # chunk_size chunks of the prompt, decode tokens only with save_decode_cache, the GPU -> CPU
    # copy of wait_for_save charged to the step (global_save_copy)
    global_chunk_tokens: int = 256
    save_decode_cache: bool = False
    global_save_copy: bool = True
    # Deployment variant of ``preset`` (smetric.core.presets.variant_name): KV cache dtype
    # (bf16 | fp8), tensor-parallel GPUs per instance (None = the preset's), GPU kind
    # (h20 | h20-3e | h200, None = the preset's) and HBM per GPU override in GB.
    kv_dtype: str = "bf16"
    tp: int | None = None
    gpu: str | None = None
    hbm_gb: float | None = None
    max_context: int | None = None  # e.g. 1,048,576 with YaRN (Qwen3-Coder model card)
    # SMetric's SLO check credits the global tier (a migrated session is reloaded over the NIC,
    # paper §4.2); off = algorithms.md's literal local-hit-only check. Ignored without a tier.
    global_aware_slo: bool = True
    warmup_s: float = 3600.0
    measure_s: float = 3600.0
    seed: int = 0
    # router state: "deployed" = the picker's router core with a cost model fitted from profiled
    # prefills and online prefill rates; "oracle" = engine cost model, speed 1.0 (sim/view.py)
    router_view: str = "deployed"
    legacy_ledger: bool = False  # charge cost(L - c, L), global-tier hits ignored (ablation; sim/view.py)
    # The policy-owned parameters as the picker's config file holds them (``policy.parameters``:
    # ``slack``, ``hitRatio``, ``tiered``, ...), canonical JSON; "{}" = every policy's defaults
    # (smetric.policy.params_mapping). Context keys (mode, SLO, cost model, block size) come from the
    # simulated cluster, not from here.
    policy_parameters: str = "{}"
    # "agents": a fixed population of concurrent agents in steady state from t = 0, each starting
    # a new family when its last one ends; "stationary": Poisson family starts, also before t = 0;
    # "cold": Poisson family starts at t >= 0 only (the request rate climbs for hours) -- workload.py
    arrivals: str = "agents"
    # agents join at uniform times in [0, agent_entry_s) (None = half the warm-up), so their
    # uncached first prefills do not all land at t = 0 (smetric.trace.SteadyAgents)
    agent_entry_s: float | None = None
    # write the KV of the joined sessions' earlier turns to the global tier before t = 0 (its
    # steady state; smetric.sim.prewarm.prewarm_tier); off = every joined session starts uncached
    prewarm_global_tier: bool = True
    # where the tier view reads g from (sim/tier_view.py; smetric.router.tier_model): "estimate" =
    # the write estimate, what the operator's deployment gives the picker (LMCache publishes no KV
    # events unless enable_kv_events, which is not rendered); "events" = the tier's store events
    # without removals (LMCache's CacheStoreEvent), bounded by the tier's capacity; "exact" = the
    # simulated tier's content (an oracle: ablations only)
    tier_hits: str = "estimate"
    # the g the framework (the flow gate's TTFT estimate, the dispatch ledger's charge) reads for a
    # policy whose rule does not read the tier (the baselines as shipped): "tier" = the one tier
    # model, as for SMetric (tier_hits; the default since 6 Dec 2026); "session" = the session's
    # previous turn (smetric.router.estimated_global_hit), every run before (docs/overload.md, 8e)
    framework_g: str = "tier"
    # flow control at the simulated gateway (smetric.policy.flowcontrol, sim/gateway.py): canonical
    # JSON of FlowControlConfig fields (snake_case) plus the clients' "max_retries" and
    # "jitter"; "" = off (every request is dispatched at once, as before)
    flow_control: str = ""

    def __post_init__(self) -> None:
        if self.router_view not in ROUTER_VIEWS:
            raise ValueError(
                f"router_view must be one of {', '.join(ROUTER_VIEWS)}, got {self.router_view!r}"
            )
        if self.tier_hits not in TIER_HITS:
            raise ValueError(f"tier_hits must be one of {', '.join(TIER_HITS)}, got {self.tier_hits!r}")
        if self.framework_g not in FRAMEWORK_G:
            raise ValueError(f"framework_g must be one of {', '.join(FRAMEWORK_G)}, got {self.framework_g!r}")
        if self.arrivals not in ARRIVALS:
            raise ValueError(f"arrivals must be one of {', '.join(ARRIVALS)}, got {self.arrivals!r}")
        if self.agent_entry_s is not None and not (0 <= self.agent_entry_s <= self.warmup_s):
            raise ValueError("agent_entry_s must be in [0, warmup_s]: agents join before the window")
        if not (self.warmup_s >= 0 and self.measure_s > 0):
            raise ValueError("warmup_s must be >= 0 and measure_s > 0")
        if self.instances < 1:
            raise ValueError("instances must be >= 1")
        if self.mode not in ("colocated", "disaggregated"):
            raise ValueError(f"mode must be colocated or disaggregated, got {self.mode!r}")
        get_preset(self.preset_name)
        self.global_path  # noqa: B018 -- validates the global-path fields
        self.own_params  # noqa: B018 -- validates policy_parameters
        self.flow_control_config  # noqa: B018 -- validates flow_control

    def with_params(self, **keys: object) -> SimConfig:
        """This config with ``keys`` (YAML keys, e.g. ``slack=2.0`` or ``tiered={...}``) set in
        :attr:`policy_parameters`."""
        merged = {**json.loads(self.policy_parameters), **keys}
        return replace(self, policy_parameters=json.dumps(merged, sort_keys=True))

    @property
    def own_params(self) -> tuple[ParamsModel, ...]:
        """The policy-owned ``Params`` instances of :attr:`policy_parameters`."""
        mapping = _json_object(self.policy_parameters, "policy_parameters")
        context = sorted(k for k in mapping if k in CONTEXT_KEYS)
        if context:
            raise ValueError(
                f"policy_parameters holds context keys {context}: the simulated cluster sets them"
            )
        return params_from_mapping(mapping).own

    @property
    def flow_control_config(self) -> tuple[FlowControlConfig, ClientRetry] | None:
        """The gateway's flow control and its clients' retry behaviour; ``None`` when off."""
        if not self.flow_control:
            return None
        mapping = _json_object(self.flow_control, "flow_control")
        client_keys = {"max_retries", "jitter", "sessions_wait"}
        fc_keys = set(FlowControlConfig.__dataclass_fields__)
        unknown = sorted(set(mapping) - client_keys - fc_keys)
        if unknown:
            raise ValueError(f"flow_control: unknown keys {unknown}; known: {sorted(client_keys | fc_keys)}")
        try:
            fc = FlowControlConfig(**{k: v for k, v in mapping.items() if k in fc_keys})
            client = ClientRetry(**{k: v for k, v in mapping.items() if k in client_keys})
        except TypeError as exc:
            raise ValueError(f"flow_control: {exc}") from None
        return (fc, client) if fc.enabled else None

    @property
    def agent_entry_window_s(self) -> float:
        """Agents join in ``[0, this)``: ``agent_entry_s``, else half the warm-up."""
        return self.warmup_s / 2 if self.agent_entry_s is None else self.agent_entry_s

    @property
    def preset_name(self) -> str:
        """The preset with this run's deployment options, e.g. ``qwen3-30b-h20/kv=fp8/tp=2``."""
        return variant_name(
            self.preset,
            kv_dtype=self.kv_dtype,
            tp=self.tp,
            gpu=self.gpu,
            hbm_gb=self.hbm_gb,
            max_context=self.max_context,
        )

    @property
    def global_path(self) -> GlobalPath:
        return GlobalPath(
            self.global_load_gbit_s,
            self.global_store_gbit_s,
            self.global_lookup_s,
            self.global_write_back,
            self.global_load_mode,
            self.global_placement,
            self.global_node_local_gbit_s,
            chunk_tokens=self.global_chunk_tokens,
            save_decode_cache=self.save_decode_cache,
            save_copy=self.global_save_copy,
        )

    def global_load_link_gbit_s(self, preset: InstancePreset) -> float:
        """The rate one instance loads at when alone: per-GPU rate x GPUs, capped by the NIC."""
        if self.global_load_gbit_s is None:
            return self.nic_gbit_s
        return min(self.nic_gbit_s, self.global_load_gbit_s * preset.n_gpus)


def _json_object(text: str, field: str) -> dict[str, Any]:
    """``text`` parsed as a JSON object; a ``ValueError`` naming ``field`` otherwise."""
    try:
        mapping = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ValueError(f"{field} is not JSON: {exc}") from None
    if not isinstance(mapping, dict):
        raise ValueError(f"{field} must be a JSON object")
    return mapping
