"""Precise prefix index: the engine's own block hashes, fed by its KV events.

``key()`` tokenizes the prompt text (unless the caller passes token ids) and hashes full blocks
exactly as vLLM does (:class:`smetric.core.blockhash.BlockHasher`, same PYTHONHASHSEED, algorithm and
block size as the engines); ``local_hits()`` finds, per endpoint, the longest prefix of those hashes
present in the endpoint's GPU block set (:class:`~smetric.epp.kvevents.store.BlockStore`). The text
must be what the engine tokenizes: the request path renders chats with
:meth:`smetric.core.tokenizer.Tokenizer.render_chat` (the model's chat template when a HF tokenizer
with one is configured, else the raw concatenation of the message texts -- then hits are exact only
for plain completions and are approximate for chats).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

from smetric.core.blockhash import BlockHasher
from smetric.core.tokenizer import Tokenizer
from smetric.epp.contracts import PromptKey
from smetric.epp.index.prefix import cached_prefix_blocks
from smetric.epp.kvevents.store import BlockStore


class PreciseIndex:
    def __init__(self, tokenizer: Tokenizer, hasher: BlockHasher, store: BlockStore) -> None:
        self._tokenizer = tokenizer
        self._hasher = hasher
        self._store = store

    @property
    def block_size(self) -> int:
        return self._hasher.block_size

    @property
    def tokens_per_key(self) -> int:
        return self._hasher.block_size

    # PoolIndex: the engines must hash with the same block size; hits come from their KV events.
    @property
    def engine_block_size(self) -> int | None:
        return self._hasher.block_size

    @property
    def reads_kv_events(self) -> bool:
        return True

    def forget(self, address: str) -> None:
        """No-op: the KV-event subscriber owns each endpoint's block set."""

    @property
    def store(self) -> BlockStore:
        return self._store

    def key(self, prompt_text: str, token_ids: Sequence[int] | None = None) -> PromptKey:
        ids = tuple(token_ids) if token_ids is not None else tuple(self._tokenizer.encode(prompt_text))
        return PromptKey(
            text=prompt_text,
            prompt_tokens=len(ids),
            token_ids=ids,
            block_keys=tuple(self._hasher.external_hashes(ids)),
        )

    def key_messages(self, messages: Sequence[Mapping[str, Any]]) -> PromptKey:
        """Key of a chat request from its ``messages``, rendered as the engine renders them (the
        tokenizer's chat template, else the raw concatenation). Prefer this over :meth:`key` for chat
        APIs: the picker's own role-marked rendering does not produce the engine's token ids."""
        return self.key(self._tokenizer.render_chat(messages))

    def local_hits(self, key: PromptKey, addresses: Sequence[str]) -> dict[str, int]:
        keys = key.block_keys
        bs = self._hasher.block_size
        out: dict[str, int] = {}
        for address in addresses:
            blocks = self._store.blocks(address)
            out[address] = cached_prefix_blocks(keys, blocks) * bs if blocks and keys else 0
        return out

    def on_routed(self, key: PromptKey, address: str) -> None:
        """No-op: the engine's KV events, not routing decisions, are the truth here."""
