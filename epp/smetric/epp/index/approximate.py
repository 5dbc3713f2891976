"""Approximate prefix index: no tokenizer, no engine events -- learn from routing decisions.

The prompt's UTF-8 bytes are cut into blocks of ``chars_per_token * block_tokens`` bytes (4 bytes
per token, the usual estimate for English and code; ``block_tokens`` is the engine's KV block
size), keyed in groups of ``group_blocks`` blocks (default 4: 256 bytes, ~64 tokens per key, so
a hit is known to within 64 tokens and a 128 KiB prompt costs 512 keys instead of 2,048). Each
group gets a 64-bit key standing for the *whole prefix* up to and including it (:mod:`smetric.epp.index.chainhash`: vectorized,
deterministic across processes). Every routed request inserts its keys into that endpoint's LRU,
tail first, so the prefix is the most recent and eviction takes tails first, as in vLLM. The LRU
holds as many groups as cover the engine's GPU blocks (``num_gpu_blocks`` from
``vllm:cache_config_info``, via ``capacity_blocks``; ``default_capacity_blocks`` before the first
scrape). Hits are reported in estimated tokens (whole groups).

Hot-path cost: the LRU update runs at C speed (``OrderedDict.update`` / ``move_to_end`` /
``popitem`` mapped over the chain, no Python loop per block), and a hit is found by binary search.
Binary search is exact because each endpoint's cached set is *prefix-closed* for every chain:
key ``i`` of a prompt encodes blocks ``0..i``, so any insert that touched key ``i`` also touched
keys ``0..i-1`` and made them more recent; eviction takes the least recent first, so block ``i``
can be cached only while all blocks before it are (up to a 64-bit key collision).

Limits (documented): it cannot see evictions caused by other traffic, preemption, or engine
restarts other than through capacity; it never learns from requests sent elsewhere.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from itertools import repeat
from typing import TYPE_CHECKING

from smetric.epp.contracts import PromptKey
from smetric.epp.index.chainhash import ChainHasher
from smetric.router.tier_model import KeyLru

if TYPE_CHECKING:
    from smetric.epp.kvevents.store import BlockStore

CHARS_PER_TOKEN = 4  # bytes of prompt per estimated token (chars/4 rule of thumb)

CapacityFn = Callable[[str], int | None]


class ApproximateIndex:
    def __init__(
        self,
        block_tokens: int = 16,
        capacity_blocks: CapacityFn | None = None,
        default_capacity_blocks: int = 65_536,
        chars_per_token: int = CHARS_PER_TOKEN,
        group_blocks: int = 4,
    ) -> None:
        if min(block_tokens, chars_per_token, default_capacity_blocks, group_blocks) <= 0:
            raise ValueError(
                "block_tokens, chars_per_token, default_capacity_blocks and group_blocks must be positive"
            )
        self._group_blocks = group_blocks
        self._block_tokens = block_tokens * group_blocks  # tokens per key
        self._hasher = ChainHasher(self._block_tokens * chars_per_token)
        self._chars_per_token = chars_per_token
        self._capacity = capacity_blocks
        self._default_capacity = default_capacity_blocks
        self._lrus: dict[str, KeyLru] = {}

    @property
    def tokens_per_key(self) -> int:
        """Estimated tokens one key stands for (``block_tokens * group_blocks``)."""
        return self._block_tokens

    # PoolIndex: learns from routing alone, whatever block size the engines report.
    @property
    def engine_block_size(self) -> int | None:
        return None

    @property
    def reads_kv_events(self) -> bool:
        return False

    @property
    def store(self) -> BlockStore | None:
        return None

    def set_capacity_source(self, capacity_blocks: CapacityFn) -> None:
        """Where per-endpoint LRU sizes come from (the datastore's scraped ``num_gpu_blocks``)."""
        self._capacity = capacity_blocks

    def key(self, prompt_text: str, token_ids: Sequence[int] | None = None) -> PromptKey:
        keys = self._hasher.prefix_keys(prompt_text.encode("utf-8"))
        tokens = len(token_ids) if token_ids is not None else -(-len(prompt_text) // self._chars_per_token)
        return PromptKey(text=prompt_text, prompt_tokens=tokens, block_keys=tuple(keys))

    def local_hits(self, key: PromptKey, addresses: Sequence[str]) -> dict[str, int]:
        keys = key.block_keys
        bt = self._block_tokens
        out: dict[str, int] = {}
        for address in addresses:
            lru = self._lrus.get(address)
            hit = lru.prefix_len(keys) * bt if lru is not None and keys else 0
            out[address] = min(hit, key.prompt_tokens)
        return out

    def on_routed(self, key: PromptKey, address: str) -> None:
        if not key.block_keys:
            return
        blocks = (self._capacity(address) if self._capacity else None) or self._default_capacity
        capacity = -(-blocks // self._group_blocks)
        self._lrus.setdefault(address, KeyLru()).insert_chain(key.block_keys, capacity)

    def forget(self, address: str) -> None:
        """Drop an endpoint (removed from the pool, or restarted)."""
        self._lrus.pop(address, None)

    def export_state(self) -> dict[str, list[int]]:
        """Per endpoint, its keys least recent first (a restarted picker's warm start)."""
        return {address: list(lru.keys) for address, lru in self._lrus.items()}

    def import_state(self, state: dict[str, list[int]]) -> None:
        """Replace the LRUs with ``state`` (as :meth:`export_state` wrote it)."""
        self._lrus = {}
        for address, keys in state.items():
            lru = KeyLru()
            lru.keys.update(zip(keys, repeat(None)))
            self._lrus[address] = lru

    def size(self, address: str) -> int:
        """Keys (groups of ``group_blocks`` blocks) held for ``address``."""
        lru = self._lrus.get(address)
        return len(lru.keys) if lru else 0
