"""Prompt preparation: render, tokenize and block-hash a request exactly as the picker's precise
prefix index does, plus the deterministic filler the emulator "generates".

Rendering: chat ``messages`` go through the shared tokenizer's ``render_chat`` -- with the default
dependency-free :class:`~smetric.core.tokenizer.FallbackTokenizer` that is the raw concatenation of
the messages' text contents in order (no role markers); with ``--tokenizer PATH`` it is that
tokenizer's own chat template. Completion prompts are used verbatim (a token-id list is taken as is).

Generation: output token ``k`` is the piece ``FILLER_WORDS[k // 2 % 5]`` for even ``k`` and a single
space for odd ``k``, so the fallback tokenizer re-tokenizes the answer into exactly the pieces
generated, and the next turn's prompt (previous prompt + answer + new message) shares the cached
prefix block for block.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from smetric.core.blockhash import BlockHasher
from smetric.core.tokenizer import Tokenizer

FILLER_WORDS: tuple[str, ...] = ("lore", "ipsu", "dolo", "sit", "amet")


@dataclass(frozen=True, slots=True)
class PreparedPrompt:
    text: str
    token_ids: tuple[int, ...]

    @property
    def num_tokens(self) -> int:
        return len(self.token_ids)


@dataclass(frozen=True, slots=True)
class PreparedRequest:
    """A prompt plus its answer-to-be: the token sequence the engine will hold when the request
    finishes and the vLLM hashes of its full blocks (the first ``prompt.num_tokens // block``
    belong to the prompt)."""

    prompt: PreparedPrompt
    output_tokens: int
    sequence: tuple[int, ...]
    block_hashes: tuple[int, ...]


class Prompter:
    """Tokenizer + block hasher with the engines' shared configuration (block size, hash seed)."""

    def __init__(self, tokenizer: Tokenizer, hasher: BlockHasher) -> None:
        self.tokenizer = tokenizer
        self.hasher = hasher
        self._filler_ids = tuple(self._piece_id(p) for p in (*FILLER_WORDS, " "))

    def _piece_id(self, piece: str) -> int:
        ids = self.tokenizer.encode(piece)
        if not ids:
            raise ValueError(f"tokenizer {self.tokenizer.name} maps filler piece {piece!r} to no token")
        return ids[0]

    def chat(self, messages: Sequence[Mapping[str, Any]]) -> PreparedPrompt:
        text = self.tokenizer.render_chat(messages)
        return PreparedPrompt(text, tuple(self.tokenizer.encode(text)))

    def completion(self, prompt: str | Sequence[int]) -> PreparedPrompt:
        if isinstance(prompt, str):
            return PreparedPrompt(prompt, tuple(self.tokenizer.encode(prompt)))
        return PreparedPrompt("", tuple(int(t) for t in prompt))

    @staticmethod
    def filler_piece(k: int) -> str:
        return FILLER_WORDS[(k // 2) % len(FILLER_WORDS)] if k % 2 == 0 else " "

    def filler_token_id(self, k: int) -> int:
        return self._filler_ids[(k // 2) % len(FILLER_WORDS)] if k % 2 == 0 else self._filler_ids[-1]

    def filler_text(self, n_tokens: int) -> str:
        return "".join(self.filler_piece(k) for k in range(n_tokens))

    def request(self, prompt: PreparedPrompt, output_tokens: int) -> PreparedRequest:
        """Tokens and block hashes of prompt + generated answer (pure: safe in a worker thread)."""
        seq = prompt.token_ids + tuple(self.filler_token_id(k) for k in range(output_tokens))
        return PreparedRequest(prompt, output_tokens, seq, tuple(self.block_hashes(seq)))

    def block_hashes(self, token_ids: Sequence[int]) -> list[int]:
        """64-bit event-form hashes of every full block (vLLM ``BlockStored.block_hashes``)."""
        return self.hasher.external_hashes(token_ids)
