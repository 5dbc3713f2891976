"""Cluster-wide global KV tier (Mooncake store via LMCache), with per-node NIC contention.

Model
-----
* Content: one cluster-wide :class:`~smetric.engine.prefix_cache.BlockCache` without pins. Every
  block an instance computes is written through (LMCache ``save``); LRU eviction when a capacity
  is set. A hit costs transfer time, never compute.
* Capacity kinds (``--global-tier``):

  - ``none``: no global tier (instances see only their own GPU tier);
  - ``small``: 128 GB for the whole cluster -- the smallest store the paper evaluates
    (SMetric paper §5.3, "the 128 GB store"); with Qwen3-30B (96 KiB of KV per token) that is
    about 1.3 M tokens, a dozen median agent prompts;
  - ``full``: unbounded ("fully provisioned": the paper's testbed store caches nearly all
    ongoing sessions, §5.1).
* Bandwidth: each node has one NIC of ``nic_gbit_s`` (default 200 Gb/s: the paper testbed's RDMA
  NICs, §5.1), shared by the instances on that node (8 GPUs per server in the testbed, so
  ``8 // gpus_per_instance`` instances per node). Loads into a node are served FIFO on its link
  (a request's load starts when the previous one on that node finished): deterministic, and the
  completion time is known when the load starts. All loads are charged to the NIC (a conservative
  simplification: Mooncake spreads segments over nodes, so some reads are node-local).
* Writes (write-through) are asynchronous in LMCache and are not charged to the link.
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from smetric.core.presets import InstancePreset
from smetric.engine.prefix_cache import BlockCache, Piece

GlobalTierKind = Literal["none", "small", "full"]
GLOBAL_TIER_KINDS: tuple[str, ...] = ("none", "small", "full")
SMALL_TIER_BYTES = 128e9  # paper §5.3: smallest evaluated global store
DEFAULT_NIC_GBIT_S = 200.0  # paper §5.1: 200 Gbps RDMA NICs
GPUS_PER_NODE = 8  # paper §5.1: servers with eight H20 GPUs


class GlobalTier:
    """The global tier's content and the per-node transfer links."""

    __slots__ = ("_cache", "_link_free_s", "block_bytes", "bytes_loaded", "loads", "nic_bytes_s")

    def __init__(
        self, capacity_blocks: int | None, block_bytes: float, nic_bytes_s: float, n_nodes: int
    ) -> None:
        if nic_bytes_s <= 0 or block_bytes <= 0 or n_nodes <= 0:
            raise ValueError("global tier needs positive block_bytes, nic_bytes_s and n_nodes")
        self._cache = BlockCache(capacity_blocks)
        self.block_bytes = block_bytes
        self.nic_bytes_s = nic_bytes_s
        self._link_free_s = [0.0] * n_nodes
        self.bytes_loaded = 0.0
        self.loads = 0

    @property
    def capacity_blocks(self) -> int | None:
        return self._cache.capacity_blocks

    @property
    def cached_blocks(self) -> int:
        return self._cache.cached_blocks

    def match(self, pieces: Sequence[Piece], max_blocks: int | None = None) -> int:
        return self._cache.match(pieces, max_blocks)

    def write(self, pieces: Sequence[Piece]) -> None:
        """Write-through of computed blocks (already-present ones are refreshed in the LRU)."""
        self._cache.insert(pieces)
        self._cache.touch(pieces)  # one LRU stamp for the whole write (segments coalesce)

    def load(self, node: int, n_blocks: int, now_s: float, pieces: Sequence[Piece] = ()) -> float:
        """Start loading ``n_blocks`` into an instance on ``node``; returns when the load ends."""
        if n_blocks <= 0:
            return now_s
        if pieces:
            self._cache.touch(pieces)
        nbytes = n_blocks * self.block_bytes
        start = max(now_s, self._link_free_s[node])
        end = start + nbytes / self.nic_bytes_s
        self._link_free_s[node] = end
        self.bytes_loaded += nbytes
        self.loads += 1
        return end

    def link_free_s(self, node: int) -> float:
        return self._link_free_s[node]


def instances_per_node(preset: InstancePreset) -> int:
    return max(1, GPUS_PER_NODE // max(1, preset.n_gpus))


def make_global_tier(
    kind: str,
    preset: InstancePreset,
    n_instances: int,
    block_tokens: int,
    nic_gbit_s: float = DEFAULT_NIC_GBIT_S,
) -> GlobalTier | None:
    """Build the tier for ``kind`` in :data:`GLOBAL_TIER_KINDS` (``none`` returns ``None``)."""
    if kind not in GLOBAL_TIER_KINDS:
        raise ValueError(f"unknown global tier {kind!r}; choose one of {', '.join(GLOBAL_TIER_KINDS)}")
    if kind == "none":
        return None
    block_bytes = block_tokens * preset.model.kv_bytes_per_token
    capacity = None if kind == "full" else int(SMALL_TIER_BYTES // block_bytes)
    per_node = instances_per_node(preset)
    n_nodes = max(1, -(-n_instances // per_node))
    return GlobalTier(capacity, block_bytes, nic_gbit_s * 1e9 / 8.0, n_nodes)
