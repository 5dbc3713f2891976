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
* Transfer path (:class:`GlobalPath`; ``None`` = the old line-rate model: loads at NIC speed,
  free writes, no lookup cost, asynchronous loads). With a path, a load of ``b`` bytes started at
  ``s`` by an instance on node ``n`` ends at::

      max(s + b / (load_rate_per_gpu x gpus_per_instance),   # what LMCache + Mooncake achieve
          node_link[n] := max(node_link[n], s) + b / nic,      # the node's NIC, shared
          store      := max(store, s) + b / store_total)       # source side, all store nodes

  Each shared resource is a backlog of bytes at its capacity (work-conserving, O(1) per
  transfer): a lone load runs at the per-GPU rate, concurrent loads on one node or in the whole
  cluster queue behind each other once they exceed the NIC or the store's source bandwidth.
  Write-back (``write_back=True``): every block written to the tier is charged to the writer
  node's link and to the store, like a load (it is asynchronous for the engine: LMCache's remote
  put runs in the background). By symmetry of Mooncake's spread placement, a node's NIC carries
  on average its own loads plus its share of everyone's writes, i.e. its own writes.
* Load mode: ``sync`` -- the load stalls the engine's whole batch (LMCache's vLLM connector
  returns ``load_async=False`` from ``get_num_new_matched_tokens`` and retrieves in
  ``start_load_kv`` before the forward pass, request after request); ``async`` -- only the
  request waits (vLLM's ``WAITING_FOR_REMOTE_KVS``), the batch keeps running. Lookup latency
  (``lookup_s``) is paid per admitted request: by the scheduler step in ``sync`` (a blocking
  lookup), by the request alone in ``async`` (LMCacheMPConnector's lookup answers "not yet" and
  vLLM skips the request meanwhile). The engine side is in :mod:`smetric.engine.scheduler`.
* Nodes: ``8 // gpus_per_instance`` instances per 8-GPU node (paper §5.1), one NIC of
  ``nic_gbit_s`` per node (200 Gb/s RDMA, §5.1).
* Placement (``path.placement``, docs/simulator.md "Node-local path" has the sources):

  - ``spread`` (default): every load goes through the transfer engine and is charged to the NIC.
    This is what LMCache's Mooncake connector does by default: ``prefer_local_alloc`` is off, so
    the master places a replica in any node's segment, and the Mooncake client reads even a
    replica in a same-host segment through the transfer engine (its local-memcpy shortcut needs
    ``MC_STORE_MEMCPY``, off by default, and the reader's own segment).
  - ``node``: a written block lives in the writer node's DRAM segment (LMCache
    ``prefer_local_alloc`` -> ``ReplicateConfig.preferred_segment`` = own host; Mooncake's
    ``prefer_alloc_in_same_node``), first writer wins (LMCache skips keys that exist). A load's
    blocks found in the loading node's segment are copied host->GPU over PCIe at
    ``node_local_gbit_s_per_gpu`` and touch neither the NIC nor the store's source side; the
    rest are timed as above. Each node's placement index holds at most its share of the tier's
    capacity (its ``global_segment_size``), LRU.
* Defaults and their sources: :data:`CALIBRATED` and ``docs/simulator.md`` ("Global tier").
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

from smetric.core.presets import InstancePreset
from smetric.engine.prefix_cache import BlockCache, KvEventSink, Piece, count_blocks

GLOBAL_TIER_KINDS: tuple[str, ...] = ("none", "small", "full")
SMALL_TIER_BYTES = 128e9  # paper §5.3: smallest evaluated global store
DEFAULT_NIC_GBIT_S = 200.0  # paper §5.1: 200 Gbps RDMA NICs
GPUS_PER_NODE = 8  # paper §5.1: servers with eight H20 GPUs
LOAD_MODES: tuple[str, ...] = ("sync", "async")
PLACEMENTS: tuple[str, ...] = ("spread", "node")


@dataclass(frozen=True, slots=True)
class GlobalPath:
    """How a global-tier transfer is timed. ``None`` rates mean "not a limit"."""

    load_gbit_s_per_gpu: float | None = 60.0
    store_gbit_s_per_node: float | None = 200.0
    lookup_s: float = 0.002
    write_back: bool = True
    load_mode: str = "sync"
    placement: str = "spread"
    # LMCache pinned-DRAM -> GPU load, measured 22.1 GB/s (LMCache issue #4626, PCIe Gen4 L20);
    # kept at the Gen4 figure for the H20's Gen5 x16 link (64 GB/s per direction): an assumption
    node_local_gbit_s_per_gpu: float = 176.8
    # What LMCache 0.5.6 writes (lmcache/v1/config.py): chunk_size 256 (line 90), whole chunks only
    # (save_unfull_chunk false, 385-389; vllm_v1_adapter.py:351-354 saves input_len // chunk * chunk
    # tokens and 1183-1188 aligns the skipped prefix down to a chunk), no decode tokens
    # (save_decode_cache false, 126-130; vllm_v1_adapter.py:336-339). The operator renders both.
    chunk_tokens: int = 256
    save_decode_cache: bool = False
    # The store's GPU -> CPU copy blocks the step: LMCacheConnectorV1.wait_for_save ("Blocking until
    # the KV cache is saved to the connector buffer", vllm_v1_adapter.py:1104-1105, the store call at
    # 1227) runs as the forward context exits. Timed at node_local_gbit_s_per_gpu (the same copy path
    # the other way; the H20's PCIe Gen5 x16 link is 64 GB/s per direction).
    save_copy: bool = True

    def __post_init__(self) -> None:
        if self.placement not in PLACEMENTS:
            raise ValueError(
                f"global placement must be one of {', '.join(PLACEMENTS)}, got {self.placement!r}"
            )
        if not (math.isfinite(self.node_local_gbit_s_per_gpu) and self.node_local_gbit_s_per_gpu > 0):
            raise ValueError(f"node-local bandwidth must be > 0, got {self.node_local_gbit_s_per_gpu}")
        for what, v in (("load", self.load_gbit_s_per_gpu), ("store", self.store_gbit_s_per_node)):
            if v is not None and not (math.isfinite(v) and v > 0):
                raise ValueError(f"global {what} bandwidth must be a positive number or None, got {v}")
        if self.chunk_tokens < 1:
            raise ValueError(f"global chunk must be >= 1 token, got {self.chunk_tokens}")
        if not (math.isfinite(self.lookup_s) and self.lookup_s >= 0):
            raise ValueError(f"global lookup latency must be >= 0, got {self.lookup_s}")
        if self.load_mode not in LOAD_MODES:
            raise ValueError(
                f"global load mode must be one of {', '.join(LOAD_MODES)}, got {self.load_mode!r}"
            )


# LMCache + Mooncake as measured upstream (docs/simulator.md, "Global tier", has the figures):
# 60 Gb/s = 7.5 GB/s per GPU (Mooncake PR #3643: ~7-8 GB/s end to end through a vLLM KV connector
# on a 196 Gb/s link; LMCache PRs #3018 / #3172: 6.4 / ~10 GB/s), source side = one 200 Gb/s
# NIC per store node (paper §5.1), lookup 2 ms (LMCache PR #934: "1-2ms"), write-back charged,
# synchronous loads (LMCache's connector: load_async=False, LMCache issues #985, #1033).
CALIBRATED = GlobalPath()
# The previous model: line-rate loads, free writes and lookups, the batch never stalls.
LINE_RATE = GlobalPath(None, None, 0.0, False, "async", save_copy=False)


class GlobalTier:
    """The global tier's content and the transfer links (per node, and the store's source side)."""

    __slots__ = (
        "_cache",
        "_link_free_s",
        "_placed",
        "_store_free_s",
        "block_bytes",
        "bytes_loaded",
        "bytes_loaded_node_local",
        "bytes_written",
        "load_bytes_s",
        "loads",
        "local_bytes_s",
        "nic_bytes_s",
        "path",
        "store_bytes_s",
    )

    def __init__(
        self,
        capacity_blocks: int | None,
        block_bytes: float,
        nic_bytes_s: float,
        n_nodes: int,
        path: GlobalPath | None = None,
        gpus_per_instance: int = 1,
    ) -> None:
        if nic_bytes_s <= 0 or block_bytes <= 0 or n_nodes <= 0 or gpus_per_instance <= 0:
            raise ValueError("global tier needs positive block_bytes, nic_bytes_s, n_nodes and gpus")
        self._cache = BlockCache(capacity_blocks)
        self.block_bytes = block_bytes
        self.nic_bytes_s = nic_bytes_s
        self.path = path if path is not None else LINE_RATE
        p = self.path
        # per-instance load rate (every GPU of a TP instance loads its own shard of the KV)
        self.load_bytes_s = (
            math.inf
            if p.load_gbit_s_per_gpu is None
            else p.load_gbit_s_per_gpu * 1e9 / 8.0 * gpus_per_instance
        )
        self.store_bytes_s = (
            math.inf if p.store_gbit_s_per_node is None else p.store_gbit_s_per_node * 1e9 / 8.0 * n_nodes
        )
        self.local_bytes_s = p.node_local_gbit_s_per_gpu * 1e9 / 8.0 * gpus_per_instance
        share = None if capacity_blocks is None else max(1, capacity_blocks // n_nodes)
        self._placed = [BlockCache(share) for _ in range(n_nodes)] if p.placement == "node" else None
        self._link_free_s = [0.0] * n_nodes
        self._store_free_s = 0.0
        self.bytes_loaded = 0.0
        self.bytes_loaded_node_local = 0.0
        self.bytes_written = 0.0
        self.loads = 0

    @property
    def synchronous(self) -> bool:
        """A load stalls the loading instance's whole batch (LMCache's default connector)."""
        return self.path.load_mode == "sync"

    @property
    def lookup_s(self) -> float:
        return self.path.lookup_s

    @property
    def capacity_blocks(self) -> int | None:
        return self._cache.capacity_blocks

    @property
    def cached_blocks(self) -> int:
        return self._cache.cached_blocks

    def match(self, pieces: Sequence[Piece], max_blocks: int | None = None) -> int:
        return self._cache.match(pieces, max_blocks)

    def observe_stores(self, sink: KvEventSink | None) -> None:
        """Report the blocks newly stored in the tier to ``sink`` (the store events a picker could be fed)."""
        self._cache.set_events(sink)

    def written_range(
        self, tier_blocks: int, prompt_tokens: int, block_tokens: int, n_blocks: int
    ) -> tuple[int, int]:
        """Block positions ``[lo, hi)`` of a prompt that LMCache writes after its prefill: from the tier's hit
        aligned down to a chunk, to the prompt's last whole chunk (:class:`GlobalPath` has the lines)."""
        chunk = self.path.chunk_tokens
        hi = min(n_blocks, max(0, prompt_tokens) // chunk * chunk // block_tokens)
        lo = min(hi, tier_blocks * block_tokens // chunk * chunk // block_tokens)
        return lo, hi

    def save_copy_s(self, n_blocks: int) -> float:
        """Seconds the step spends copying ``n_blocks`` GPU -> CPU for the store (0 without ``save_copy``)."""
        if not self.path.save_copy or n_blocks <= 0:
            return 0.0
        return n_blocks * self.block_bytes / self.local_bytes_s

    def refresh(self, pieces: Sequence[Piece]) -> None:
        """A lookup that hit these blocks counts as a use in the store's LRU (no bytes move)."""
        if pieces:
            self._cache.touch(pieces)

    def write(self, pieces: Sequence[Piece], node: int = -1, now_s: float = 0.0) -> None:
        """Write-through of computed blocks (already-present ones are refreshed in the LRU).

        With ``path.write_back`` and a ``node``, the written bytes occupy that node's link and the
        store's source side from ``now_s`` (asynchronously: nobody waits for them). With ``node``
        placement the blocks new to the tier are placed in that node's segment."""
        if self._placed is not None and node >= 0 and pieces:
            new = self._cache.uncached(pieces)
            if new:
                self._placed[node].insert(new)
        self._cache.insert(pieces)
        self._cache.touch(pieces)  # one LRU stamp for the whole write (segments coalesce)
        if node >= 0 and self.path.write_back and pieces:
            nbytes = count_blocks(pieces) * self.block_bytes
            self._occupy(node, nbytes, now_s)
            self.bytes_written += nbytes

    def _occupy(self, node: int, nbytes: float, start_s: float) -> float:
        """Add ``nbytes`` to the node link's and the store's backlogs; when both have drained."""
        link = max(self._link_free_s[node], start_s) + nbytes / self.nic_bytes_s
        self._link_free_s[node] = link
        if self.store_bytes_s < math.inf:
            self._store_free_s = max(self._store_free_s, start_s) + nbytes / self.store_bytes_s
            return max(link, self._store_free_s)
        return link

    def load(self, node: int, n_blocks: int, now_s: float, pieces: Sequence[Piece] = ()) -> float:
        """Start loading ``n_blocks`` into an instance on ``node`` at ``now_s``; returns when the
        load ends (own rate, node link and store backlogs; see the module docstring)."""
        if n_blocks <= 0:
            return now_s
        if pieces:
            self._cache.touch(pieces)
        local = 0
        if self._placed is not None and pieces:
            local = min(n_blocks, self._placed[node].cached_count(pieces))
            if local:
                self._placed[node].touch(pieces)
        nbytes = n_blocks * self.block_bytes
        local_bytes = local * self.block_bytes
        remote_bytes = nbytes - local_bytes
        # node-local bytes: host->GPU over PCIe only; the rest: transfer engine, NIC and store
        end = self._occupy(node, remote_bytes, now_s) if remote_bytes > 0 else now_s
        own_s = local_bytes / self.local_bytes_s
        if self.load_bytes_s < math.inf:
            own_s += remote_bytes / self.load_bytes_s
        end = max(end, now_s + own_s)
        self.bytes_loaded += nbytes
        self.bytes_loaded_node_local += local_bytes
        self.loads += 1
        return end

    def placed_blocks(self, node: int) -> int:
        """Blocks whose replica lives in ``node``'s segment (0 with ``spread`` placement)."""
        return 0 if self._placed is None else self._placed[node].cached_blocks

    def link_free_s(self, node: int) -> float:
        """When the node's link backlog (loads and write-back) drains."""
        return self._link_free_s[node]

    def store_free_s(self) -> float:
        """When the store's source-side backlog drains (0 when the store is not a limit)."""
        return self._store_free_s


def instances_per_node(preset: InstancePreset) -> int:
    return max(1, GPUS_PER_NODE // max(1, preset.n_gpus))


def tier_capacity_tokens(
    kind: str, preset: InstancePreset, block_tokens: int, token_cost_scale: float = 1.0
) -> int | None:
    """The capacity of the tier :func:`make_global_tier` builds for ``kind``, in (modelled) tokens; ``None`` for
    a full tier or none."""
    if kind != "small":
        return None
    block_bytes = block_tokens * preset.model.kv_bytes_per_token * token_cost_scale
    return int(SMALL_TIER_BYTES // block_bytes) * block_tokens


def tier_segment_tokens(
    kind: str, preset: InstancePreset, n_instances: int, block_tokens: int, token_cost_scale: float = 1.0
) -> int | None:
    """What each of ``n_instances`` contributes to that tier (:func:`tier_capacity_tokens` over them): the
    policies get the tier's size as the operator renders it, ``globalSegmentTokens`` (the simulator's policy
    parameters, the bench's picker config); ``None`` for a full tier or none."""
    tokens = tier_capacity_tokens(kind, preset, block_tokens, token_cost_scale)
    return None if tokens is None else max(1, tokens // max(1, n_instances))


def make_global_tier(
    kind: str,
    preset: InstancePreset,
    n_instances: int,
    block_tokens: int,
    nic_gbit_s: float = DEFAULT_NIC_GBIT_S,
    path: GlobalPath | None = None,
    token_cost_scale: float = 1.0,
) -> GlobalTier | None:
    """Build the tier for ``kind`` in :data:`GLOBAL_TIER_KINDS` (``none`` returns ``None``).

    ``path``: how transfers are timed; ``None`` keeps the line-rate model (:data:`LINE_RATE`);
    the simulator passes :data:`CALIBRATED` unless told otherwise. ``token_cost_scale``: modelled
    tokens per token (:mod:`smetric.engine.roofline`): a block moves and occupies that many times
    its own bytes."""
    if kind not in GLOBAL_TIER_KINDS:
        raise ValueError(f"unknown global tier {kind!r}; choose one of {', '.join(GLOBAL_TIER_KINDS)}")
    if kind == "none":
        return None
    block_bytes = block_tokens * preset.model.kv_bytes_per_token * token_cost_scale
    tokens = tier_capacity_tokens(kind, preset, block_tokens, token_cost_scale)
    capacity = None if tokens is None else tokens // block_tokens
    per_node = instances_per_node(preset)
    n_nodes = max(1, -(-n_instances // per_node))
    return GlobalTier(capacity, block_bytes, nic_gbit_s * 1e9 / 8.0, n_nodes, path, max(1, preset.n_gpus))
