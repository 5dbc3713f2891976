"""Approximate prefix index: no tokenizer, no engine events -- learn from routing decisions.

The prompt's UTF-8 bytes are cut into blocks of ``chars_per_token * block_tokens`` bytes (4 bytes
per token, the usual estimate for English and code) and each block is keyed by a chained 64-bit
hash standing for the *whole prefix* up to and including it: ``key[i] = hash((key[i-1], block[i]))``
with Python's built-in SipHash (one pass, ~6x cheaper than an incremental BLAKE2b copy per block:
0.44 vs 2.7 ms for 128 KiB measured here). Keys are process-local (SipHash is salted per process);
they never leave the process, and decisions depend only on hit lengths, so replicas still agree. Every
routed request inserts its keys into that endpoint's LRU (tail first, so the prefix is the most
recent and eviction takes tails first, as in vLLM). The LRU holds as many blocks as the engine has
GPU blocks (``num_gpu_blocks`` from ``vllm:cache_config_info``, via ``capacity_blocks``), or
``default_capacity_blocks`` before the first scrape. Hits are reported in estimated tokens.

Limits (documented): it cannot see evictions caused by other traffic, preemption, or engine
restarts other than through capacity; it never learns from requests sent elsewhere.
"""

from __future__ import annotations

from collections import OrderedDict
from collections.abc import Callable, Sequence

from smetric.epp.contracts import PromptKey
from smetric.epp.index.prefix import cached_prefix_blocks

CHARS_PER_TOKEN = 4  # bytes of prompt per estimated token (chars/4 rule of thumb)

CapacityFn = Callable[[str], int | None]


class _Lru:
    __slots__ = ("keys",)

    def __init__(self) -> None:
        self.keys: OrderedDict[int, None] = OrderedDict()

    def __contains__(self, key: object) -> bool:
        return key in self.keys

    def insert_chain(self, chain: Sequence[int], capacity: int) -> None:
        keys = self.keys
        for k in reversed(chain):  # tail first: the prefix ends up most recently used
            keys[k] = None
            keys.move_to_end(k)
        while len(keys) > capacity:
            keys.popitem(last=False)


class ApproximateIndex:
    def __init__(
        self,
        block_tokens: int = 16,
        capacity_blocks: CapacityFn | None = None,
        default_capacity_blocks: int = 65_536,
        chars_per_token: int = CHARS_PER_TOKEN,
    ) -> None:
        if block_tokens <= 0 or chars_per_token <= 0 or default_capacity_blocks <= 0:
            raise ValueError("block_tokens, chars_per_token and default_capacity_blocks must be positive")
        self._block_tokens = block_tokens
        self._block_bytes = block_tokens * chars_per_token
        self._chars_per_token = chars_per_token
        self._capacity = capacity_blocks
        self._default_capacity = default_capacity_blocks
        self._lrus: dict[str, _Lru] = {}

    def set_capacity_source(self, capacity_blocks: CapacityFn) -> None:
        """Where per-endpoint LRU sizes come from (the datastore's scraped ``num_gpu_blocks``)."""
        self._capacity = capacity_blocks

    def key(self, prompt_text: str, token_ids: Sequence[int] | None = None) -> PromptKey:
        data = prompt_text.encode("utf-8")
        step = self._block_bytes
        keys: list[int] = []
        append = keys.append
        prev = 0
        for start in range(0, len(data) - step + 1, step):
            prev = hash((prev, data[start : start + step]))
            append(prev)
        tokens = len(token_ids) if token_ids is not None else -(-len(prompt_text) // self._chars_per_token)
        return PromptKey(text=prompt_text, prompt_tokens=tokens, block_keys=tuple(keys))

    def local_hits(self, key: PromptKey, addresses: Sequence[str]) -> dict[str, int]:
        keys = key.block_keys
        bt = self._block_tokens
        out: dict[str, int] = {}
        for address in addresses:
            lru = self._lrus.get(address)
            hit = cached_prefix_blocks(keys, lru) * bt if lru is not None and keys else 0
            out[address] = min(hit, key.prompt_tokens)
        return out

    def on_routed(self, key: PromptKey, address: str) -> None:
        if not key.block_keys:
            return
        capacity = (self._capacity(address) if self._capacity else None) or self._default_capacity
        self._lrus.setdefault(address, _Lru()).insert_chain(key.block_keys, capacity)

    def forget(self, address: str) -> None:
        """Drop an endpoint (removed from the pool, or restarted)."""
        self._lrus.pop(address, None)

    def size(self, address: str) -> int:
        lru = self._lrus.get(address)
        return len(lru.keys) if lru else 0
