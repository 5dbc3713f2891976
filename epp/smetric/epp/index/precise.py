"""Precise prefix index: the engine's own block hashes, fed by its KV events.

``key()`` tokenizes the prompt text (unless the caller passes token ids) and hashes full blocks
exactly as vLLM does (:class:`smetric.core.blockhash.BlockHasher`, same PYTHONHASHSEED, algorithm and
block size as the engines); ``local_hits()`` finds, per endpoint, the longest prefix of those hashes
present in the endpoint's GPU block set (:class:`~smetric.epp.kvevents.store.BlockStore`). The text
must be what the engine tokenizes: the request path renders chats with
:meth:`smetric.core.tokenizer.Tokenizer.render_chat` (the model's chat template when a HF tokenizer
with one is configured, else the raw concatenation of the message texts -- then hits are exact only
for plain completions and are approximate for chats).

Memory: a 15 MiB agent prompt is millions of tokens. A text longer than :data:`ENCODE_CHUNK_CHARS`
is tokenized piece by piece and each piece's full blocks are hashed before the next piece is
tokenized, so the token ids of the whole prompt never exist at once; the key keeps the block hashes
and the token count (``exact_tokens``), not the ids. Pieces end before a space that follows a
letter or digit: no pre-token crosses such a boundary for the fallback tokenizer, byte-level BPE
(GPT-2 / Llama 3 / Qwen patterns attach a space to the word after it) or Metaspace, so the ids are
those of the whole text; a tokenizer that merges across a space would make hits past the first
boundary read low, never high. A text with no such space is tokenized whole.
"""

from __future__ import annotations

import re
from collections.abc import Iterator, Mapping, Sequence
from typing import Any

from smetric.core.blockhash import BlockHasher, external_hash
from smetric.core.tokenizer import Tokenizer
from smetric.epp.contracts import PromptKey
from smetric.epp.index.prefix import cached_prefix_blocks
from smetric.epp.kvevents.store import BlockStore

ENCODE_CHUNK_CHARS = 1 << 16  # a piece of a long prompt: its token ids are a few hundred KB at most
_CUT = re.compile(r"(?<=[^\W_]) ")  # a space after a letter or digit: a pre-token boundary


def encode_pieces(tokenizer: Tokenizer, text: str, chunk_chars: int | None = None) -> Iterator[list[int]]:
    """The token ids of ``text`` in consecutive pieces of about ``chunk_chars`` characters
    (default :data:`ENCODE_CHUNK_CHARS`)."""
    chunk_chars = chunk_chars or ENCODE_CHUNK_CHARS
    start, n = 0, len(text)
    while start < n:
        m = _CUT.search(text, start + chunk_chars) if n - start > chunk_chars else None
        end = m.start() if m is not None else n
        yield tokenizer.encode(text[start:end])
        start = end


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
        pieces = (
            iter((list(token_ids),)) if token_ids is not None else encode_pieces(self._tokenizer, prompt_text)
        )
        bs = self._hasher.block_size
        parent: bytes | None = None
        carry: list[int] = []
        keys: list[int] = []
        tokens = 0
        for ids in pieces:
            tokens += len(ids)
            ids = carry + ids if carry else ids
            full = len(ids) - len(ids) % bs
            new = self._hasher.block_hashes(ids[:full], parent=parent)
            if new:
                parent = new[-1]
                keys += map(external_hash, new)
            carry = ids[full:]
        return PromptKey(
            text=prompt_text,
            prompt_tokens=tokens,
            block_keys=tuple(keys),
            exact_tokens=True,
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

    # Restart snapshots (smetric.epp.server.snapshot): the block sets as the KV events left them. A
    # snapshot may list blocks an engine evicted while the picker was down (hits read high for them
    # until a gap resets that endpoint), so one older than this is not restored.
    snapshot_max_age_s: float = 120.0

    def export_state(self) -> dict[str, list[int]]:
        return self._store.export_state()

    def import_state(self, state: dict[str, list[int]]) -> None:
        self._store.import_state(state)
