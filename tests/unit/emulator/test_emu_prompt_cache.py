"""The emulator's prompter tokenizes a prompt once however often it comes back (a router's renders
on every worker, then the request itself), within a fixed number of recent prompts."""

from __future__ import annotations

from smetric.core.blockhash import BlockHasher
from smetric.core.tokenizer import FallbackTokenizer
from smetric.emulator.prompt import RECENT_PROMPTS, Prompter


class CountingTokenizer:
    """The fallback tokenizer, counting its encodes."""

    def __init__(self) -> None:
        self.inner = FallbackTokenizer()
        self.name = self.inner.name
        self.calls = 0

    def encode(self, text: str) -> list[int]:
        self.calls += 1
        return self.inner.encode(text)

    def render_chat(self, messages: object) -> str:
        return self.inner.render_chat(messages)  # type: ignore[arg-type]


def test_a_prompt_is_tokenized_once_and_the_recent_prompts_are_bounded() -> None:
    tok = CountingTokenizer()
    prompter = Prompter(tok, BlockHasher(16, "0"), recent=3)
    base = tok.calls  # the filler pieces
    msgs = [{"role": "user", "content": "fix the parser " * 50}]
    first = prompter.chat(msgs)
    for _ in range(4):  # the router's renders on four workers, then the request
        assert prompter.chat(msgs) == first
    assert tok.calls - base == 1
    for i in range(10):
        prompter.completion(f"other prompt {i}")
    assert len(prompter._recent) == 3  # bounded
    prompter.chat(msgs)  # evicted: tokenized again, to the same ids
    assert tok.calls - base == 12 and prompter.chat(msgs) == first
    assert RECENT_PROMPTS == 16 and Prompter(tok, BlockHasher(16, "0"))._recent_max == RECENT_PROMPTS
