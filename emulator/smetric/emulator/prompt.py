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

import threading
from collections import OrderedDict
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from smetric.core.blockhash import BlockHasher
from smetric.core.tokenizer import Tokenizer

FILLER_WORDS: tuple[str, ...] = ("lore", "ipsu", "dolo", "sit", "amet")
# prompts whose token ids the prompter keeps: a router renders a request on every worker and sends
# it within milliseconds, so a few prompts per instance suffice. Budget: a 100k-token prompt holds
# ~0.5 MB of text and ~3.6 MB of ids, so at most ~65 MB at full size (~8 MB at the bench's x1/8)
RECENT_PROMPTS = 16


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
    """Tokenizer + block hasher with the engines' shared configuration (block size, hash seed).

    The last :data:`RECENT_PROMPTS` rendered texts keep their token ids: one prompt is tokenized
    once however often it comes back -- vllm-router renders each request on every worker
    (``/v1/chat/completions/render``) before sending it to one, the text-identical prompt each
    time. A real vLLM renders with a compiled tokenizer in milliseconds; without this, the
    emulator's Python tokenizer would charge that router's rows N+1 tokenizations of every prompt.
    """

    def __init__(self, tokenizer: Tokenizer, hasher: BlockHasher, recent: int = 0) -> None:
        self.tokenizer = tokenizer
        self.hasher = hasher
        self._filler_ids = tuple(self._piece_id(p) for p in (*FILLER_WORDS, " "))
        self._recent: OrderedDict[str, tuple[int, ...]] = OrderedDict()
        self._recent_max = recent if recent > 0 else RECENT_PROMPTS
        self._lock = threading.Lock()

    def encode(self, text: str) -> tuple[int, ...]:
        """The text's token ids, from the recent prompts when it was seen lately."""
        with self._lock:
            ids = self._recent.get(text)
            if ids is not None:
                self._recent.move_to_end(text)
                return ids
        ids = tuple(self.tokenizer.encode(text))
        with self._lock:
            self._recent[text] = ids
            while len(self._recent) > self._recent_max:
                self._recent.popitem(last=False)
        return ids

    def _piece_id(self, piece: str) -> int:
        ids = self.tokenizer.encode(piece)
        if not ids:
            raise ValueError(f"tokenizer {self.tokenizer.name} maps filler piece {piece!r} to no token")
        return ids[0]

    def chat(self, messages: Sequence[Mapping[str, Any]]) -> PreparedPrompt:
        text = self.tokenizer.render_chat(messages)
        return PreparedPrompt(text, self.encode(text))

    def completion(self, prompt: str | Sequence[int]) -> PreparedPrompt:
        if isinstance(prompt, str):
            return PreparedPrompt(prompt, self.encode(prompt))
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
