"""Chat-history synthesiser: builds each request's ``messages`` the way a coding agent would.

A session's history is append-only: turn k sends every message of turn k-1, the assistant's
actual answer to it, then one new message (the tool result or the user's next instruction) sized so
the prompt's token count follows the trace. So consecutive prompts share their whole previous
prompt as a prefix, which is what prefix caching (and a session-aware router) can exploit.

Text is lowercase 4-letter words joined by runs of four spaces (:data:`SEPARATOR`); every
synthesised message starts with ``#`` and ends with ``.``. Under the emulator's fallback tokenizer
(word and whitespace pieces of at most 4 characters) that is 4 characters per token, the ratio the
picker's token estimate assumes (``ceil(chars / 4)``, as GIE's and llm-d's
``averageCharactersPerToken = 4``) and real text about has: with single spaces (2.5 characters per
token) the bench's picker saw every prompt and cached prefix 1.6x shorter than the engines did,
which the simulator (reading the trace's token counts) does not. Punctuation is always a token of its own, so a message boundary never
merges two words into one token and the prompt's tokens are the concatenation of each message's
tokens (exact for the raw-concatenation rendering of the emulator's fallback tokenizer; within the
chat template's per-message overhead for a real template). Sizes are measured with the same
tokenizer the emulator uses, never guessed.

A context reset in the trace (the prompt shrinks below the history, e.g. compaction) starts a new
history: the session's system message plus one message of the remaining size.
"""

from __future__ import annotations

import zlib
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

Message = dict[str, str]
TokenCount = Callable[[str], int]  # tokens of one message's text (the emulator's tokenizer)

_LETTERS = np.frombuffer(b"abcdefghijklmnopqrstuvwxyz", dtype=np.uint8)
_MIN_MESSAGE_TOKENS = 3  # "#", one word, "."
SEPARATOR = "    "  # one whitespace piece: a word and its separator are 8 characters, 2 tokens


def _seed(*parts: object) -> int:
    return zlib.crc32("\x1f".join(map(str, parts)).encode("utf-8"))


def _words(rng: np.random.Generator, n: int) -> list[str]:
    if n <= 0:
        return []
    codes = _LETTERS[rng.integers(0, len(_LETTERS), size=(n, 4))]
    return [row.tobytes().decode("ascii") for row in codes]


def synth_text(n_tokens: int, seed: int, count: TokenCount) -> str:
    """A message text of ``n_tokens`` tokens under ``count`` (at least :data:`_MIN_MESSAGE_TOKENS`).

    Built with the word/space/punctuation layout above, then corrected by measuring: a word plus
    its space is ~2 tokens, so the estimate converges in a step or two for any word-piece tokenizer.
    """
    target = max(_MIN_MESSAGE_TOKENS, int(n_tokens))
    rng = np.random.default_rng(seed)
    k = max(1, (target - 1) // 2)
    pool = _words(rng, k + 64)
    text = ""
    for _ in range(12):
        if k + 1 > len(pool):
            pool += _words(rng, k + 1 - len(pool) + 64)
        text = "#" + SEPARATOR.join(pool[:k]) + "."
        got = count(text)
        if got == target:
            return text
        if target - got == 1:
            # one token short: lengthen the last word into two 4-letter pieces
            longer = "#" + SEPARATOR.join([*pool[: k - 1], pool[k - 1] + pool[k]]) + "."
            if count(longer) == target:
                return longer
        per_word = max(got / k, 0.5)
        k = max(1, k + (round((target - got) / per_word) or (1 if got < target else -1)))
    return text  # closest found; the request records its true prompt size from the server's usage


@dataclass(frozen=True, slots=True)
class Turn:
    """What to send for one request: the full messages and their measured prompt tokens."""

    messages: tuple[Message, ...]
    prompt_tokens: int
    reset: bool  # True when this turn started a fresh history (first turn or context reset)


@dataclass(slots=True)
class Conversation:
    """One session's growing history. Not thread-safe; one per session task."""

    session_id: str
    seed: int
    count: TokenCount
    system_seed_key: str = ""  # "" = per-session system prompt; a model name = shared across sessions
    messages: list[Message] = field(default_factory=list)
    tokens: int = 0
    _n_appended: int = 0

    def _system(self, n_tokens: int) -> Message:
        key = self.system_seed_key or self.session_id
        return {
            "role": "system",
            "content": synth_text(n_tokens, _seed(self.seed, "system", key), self.count),
        }

    def next_turn(self, prompt_tokens: int, system_tokens: int = 0, force_reset: bool = False) -> Turn:
        """Messages for a request whose prompt should be ``prompt_tokens`` tokens long.

        A fresh history (first turn, ``force_reset``, or a prompt that shrank by more than 5 % of the
        history: the trace's compaction) is a system message of ``system_tokens`` (capped so the user
        message keeps a few tokens) plus one user message. Otherwise one user message of the missing
        size is appended; when the answer alone already reached the target it is the minimal message.
        """
        target = max(2 * _MIN_MESSAGE_TOKENS, int(prompt_tokens))
        shrank = self.tokens - target > max(8, self.tokens // 20)
        reset = force_reset or not self.messages or shrank
        if reset:
            sys_tokens = min(max(_MIN_MESSAGE_TOKENS, int(system_tokens)), target - _MIN_MESSAGE_TOKENS)
            system = self._system(sys_tokens)
            self.messages = [system]
            self.tokens = self.count(system["content"])
        self._n_appended += 1
        seed = _seed(self.seed, self.session_id, self._n_appended)
        text = synth_text(target - self.tokens, seed, self.count)
        self.messages.append({"role": "user", "content": text})
        self.tokens += self.count(text)
        return Turn(tuple(dict(m) for m in self.messages), self.tokens, reset)

    def add_answer(self, text: str) -> None:
        """Append the assistant's actual response (what the agent would send back next turn)."""
        self.messages.append({"role": "assistant", "content": text})
        self.tokens += self.count(text)


def prompt_tokens_of(messages: Sequence[Message], count: TokenCount) -> int:
    """Tokens of the raw concatenation of ``messages`` (the emulator's no-template rendering)."""
    return count("".join(m["content"] for m in messages))
