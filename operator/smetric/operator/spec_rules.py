"""The spec's rules beyond single fields: memory quantities and the cross-field checks.

:data:`CEL_RULES` is what the CRD states as ``x-kubernetes-validations`` on ``.spec`` (the API
server evaluates them on the defaulted object); :func:`cross_field_problems` states the same
rules for the operator, with the offending values in its messages.
"""

from __future__ import annotations

import re
from typing import TYPE_CHECKING

from smetric.operator.sidecar import sidecar_problem
from smetric.policy.registry import POLICY_NAMES

if TYPE_CHECKING:
    from smetric.operator.spec import SMetricPoolSpec

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


def _has_or(field: str, fallback: str) -> str:
    return f"(has({field}) ? {field} : {fallback})"


def _role_tp_rule(role: str) -> str:
    gpus = _has_or(f"self.topology.{role}.gpusPerPod", "self.gpus.countPerPod")
    tp = _has_or(f"self.topology.{role}.tensorParallelSize", "self.model.tensorParallelSize")
    return f"!has(self.topology.{role}) || {gpus} == 0 || {gpus} % {tp} == 0"


ASYNC_LOAD_NEEDS_MOONCAKE_L2 = (
    "globalKV.loadMode=async renders LMCacheMPConnector, whose LMCache server reaches Mooncake through "
    "its mooncake_store L2 adapter; the pinned engine image (PyPI lmcache 0.5.6) lacks that adapter's "
    "C++ extension (lmcache.lmcache_mooncake), so the server could not start. Use loadMode=sync "
    "(LMCacheConnectorV1), or an image whose LMCache is built with the extension and set "
    "globalKV.lmcache.mooncakeL2Adapter=true"
)

# The CRD's x-kubernetes-validations on .spec (rule, message): the API server evaluates them on
# the defaulted object; cross_field_problems states the same rules for the operator.
CEL_RULES: tuple[tuple[str, str], ...] = (
    (
        "self.topology.mode != 'colocated' || has(self.topology.replicas)",
        "topology.mode=colocated requires topology.replicas",
    ),
    (
        "self.topology.mode != 'disaggregated' || (has(self.topology.prefill) && has(self.topology.decode))",
        "topology.mode=disaggregated requires topology.prefill.replicas and topology.decode.replicas",
    ),
    (
        "self.topology.mode != 'colocated' || (!has(self.topology.prefill) && !has(self.topology.decode))",
        "topology.prefill/decode are only valid with mode=disaggregated",
    ),
    (
        "self.topology.mode != 'disaggregated' || !has(self.topology.replicas)",
        "topology.replicas is only valid with mode=colocated (use prefill/decode)",
    ),
    (
        "self.gpus.countPerPod == 0 || self.gpus.countPerPod % self.model.tensorParallelSize == 0",
        "model.tensorParallelSize must divide gpus.countPerPod",
    ),
    (
        "!self.globalKV.enabled || self.globalKV.protocol != 'rdma' || size(self.globalKV.deviceNames) > 0",
        "globalKV.protocol=rdma requires globalKV.deviceNames (e.g. [mlx5_0])",
    ),
    (
        "!self.globalKV.enabled || !has(self.globalKV.loadMode) || self.globalKV.loadMode != 'async' || "
        "(has(self.globalKV.lmcache) && has(self.globalKV.lmcache.mooncakeL2Adapter) && "
        "self.globalKV.lmcache.mooncakeL2Adapter)",
        ASYNC_LOAD_NEEDS_MOONCAKE_L2,
    ),
    (_role_tp_rule("prefill"), "topology.prefill: tensorParallelSize must divide gpusPerPod"),
    (_role_tp_rule("decode"), "topology.decode: tensorParallelSize must divide gpusPerPod"),
    (
        "!has(self.router) || !has(self.router.replicas) || self.router.replicas <= 1 || "
        "(has(self.router.leaderElection) && self.router.leaderElection) || "
        "(has(self.router.prefixIndex) ? self.router.prefixIndex == 'precise' : "
        "!(has(self.model.command) && size(self.model.command) > 0))",
        "router.replicas > 1 needs the precise prefix index or router.leaderElection: approximate-index "
        "replicas learn only from their own routing (docs/picker.md)",
    ),
)


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
    kv = spec.global_kv
    if kv.enabled and kv.load_mode == "async" and not kv.lmcache.mooncake_l2_adapter:
        problems.append(ASYNC_LOAD_NEEDS_MOONCAKE_L2)
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
    if spec.picker_replicas > 1 and spec.prefix_index == "approximate" and not spec.router.leader_election:
        problems.append(
            f"router.replicas={spec.picker_replicas} with the approximate prefix index: each replica learns "
            "only from its own routing, so follow-up turns lose their engine (docs/picker.md); use "
            "router.prefixIndex=precise, router.leaderElection=true or router.replicas=1"
        )
    if spec.router.policy is not None and spec.router.policy not in POLICY_NAMES:
        problems.append(f"router.policy={spec.router.policy!r} is not one of {', '.join(POLICY_NAMES)}")
    if spec.global_kv.enabled and spec.global_kv.protocol == "rdma" and not spec.global_kv.device_names:
        problems.append("globalKV.protocol=rdma requires globalKV.deviceNames (e.g. [mlx5_0])")
    return problems
