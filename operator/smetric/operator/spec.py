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

from smetric.core.names import POLICY_NAMES

DEFAULT_GPU_PRODUCTS: tuple[str, ...] = ("NVIDIA-H20", "NVIDIA-H20-3e")
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


class ModelSpec(_Spec):
    name: str = Field(min_length=1)
    served_name: str | None = None
    image: str = "vllm/vllm-openai:latest"
    command: tuple[str, ...] = ()  # replaces `vllm serve <model>` + generated engine flags
    extra_args: tuple[str, ...] = ()
    tensor_parallel_size: int = Field(default=1, ge=1, le=64)
    max_model_len: int | None = Field(default=None, ge=1)
    block_size: int = Field(default=16, ge=16, le=1024)

    @property
    def served(self) -> str:
        return self.served_name or self.name


class RoleReplicas(_Spec):
    replicas: int = Field(ge=0, le=1024)


class RoutingSidecarSpec(_Spec):
    image: str = "ghcr.io/llm-d/llm-d-routing-sidecar"
    tag: str = "latest"


class TopologySpec(_Spec):
    mode: Literal["colocated", "disaggregated"] = "colocated"
    replicas: int | None = Field(default=None, ge=0, le=1024)
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


class LmcacheSpec(_Spec):
    chunk_size: int = Field(default=256, ge=16)
    max_local_cpu_size_gb: float = Field(default=5.0, ge=0.0, alias="maxLocalCpuSizeGB")


class GlobalKvSpec(_Spec):
    enabled: bool = False
    mooncake_image: str = "kvcacheai/mooncake:latest"
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
    slack: float = Field(default=1.0, gt=0.0)
    hit_ratio: float = Field(default=0.5, gt=0.0, lt=1.0)
    ttft_slo_base_s: float = Field(default=1.0, gt=0.0, alias="ttftSloBaseS")
    ttft_slo_per_k_tok_s: float = Field(default=0.0625, ge=0.0, alias="ttftSloPerKTokS")
    tpot_slo_s: float = Field(default=0.02, gt=0.0, alias="tpotSloS")
    cost_model: CostModelSpec | None = None
    global_fetch_s_per_token: float | None = Field(default=None, ge=0.0, alias="globalFetchSPerToken")


class RouterSpec(_Spec):
    policy: str = "smetric"
    parameters: PolicyParameters = PolicyParameters()
    prefix_index: Literal["precise", "approximate"] = "approximate"
    image: str = "ghcr.io/smetric/smetric-epp:0.1.0"
    replicas: int = Field(default=1, ge=0, le=16)
    resources: dict[str, Any] = Field(default_factory=dict)
    failure_mode: Literal["FailOpen", "FailClose"] = "FailClose"
    hash_seed: str = Field(default="0", pattern=r"^[0-9]+$")


class ParentRef(_Spec):
    name: str = Field(min_length=1)
    namespace: str | None = None


class GatewaySpec(_Spec):
    parent_ref: ParentRef
    path: str = Field(default="/", pattern=r"^/")
    hostnames: tuple[str, ...] = ()


class SMetricPoolSpec(_Spec):
    model: ModelSpec
    topology: TopologySpec = TopologySpec()
    gpus: GpuSpec = GpuSpec()
    global_kv: GlobalKvSpec = Field(default=GlobalKvSpec(), alias="globalKV")
    router: RouterSpec = RouterSpec()
    gateway: GatewaySpec | None = None

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
    if spec.router.policy not in POLICY_NAMES:
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
