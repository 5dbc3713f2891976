"""The message synthesiser: token sizes follow the trace, history is append-only."""

from __future__ import annotations

import pytest

from smetric.bench.synth import Conversation, prompt_tokens_of, synth_text
from smetric.core.tokenizer import FallbackTokenizer

TOK = FallbackTokenizer()


def count(text: str) -> int:
    return len(TOK.encode(text))


@pytest.mark.parametrize("n", [3, 4, 5, 6, 7, 64, 65, 1000, 4097])
def test_synth_text_has_exact_token_count(n: int) -> None:
    assert count(synth_text(n, seed=7, count=count)) == n


def test_synth_text_is_deterministic_and_seed_dependent() -> None:
    assert synth_text(100, 1, count) == synth_text(100, 1, count)
    assert synth_text(100, 1, count) != synth_text(100, 2, count)


def test_tiny_sizes_are_raised_to_the_minimal_message() -> None:
    assert count(synth_text(0, 1, count)) == 3


def test_prompt_sizes_follow_the_trace_and_history_is_append_only() -> None:
    conv = Conversation("sess-1", seed=3, count=count)
    targets = [500, 800, 1500, 1600, 2600]
    previous: tuple[dict[str, str], ...] = ()
    for i, target in enumerate(targets):
        turn = conv.next_turn(target, system_tokens=200)
        assert turn.prompt_tokens == target
        assert prompt_tokens_of(turn.messages, count) == target  # concatenation is additive
        assert turn.reset == (i == 0)
        if previous:
            # every earlier message, then the assistant's answer, then the new one
            assert turn.messages[: len(previous)] == previous
            assert len(turn.messages) == len(previous) + 1
            assert turn.messages[len(previous) - 1]["role"] == "assistant"
            assert turn.messages[-1]["role"] == "user"
            text = TOK.render_chat(turn.messages)
            assert text.startswith(TOK.render_chat(previous))
            prev_ids = TOK.encode(TOK.render_chat(previous))
            assert TOK.encode(text)[: len(prev_ids)] == prev_ids  # token-level prefix too
        answer = f" answer {i}: done, ok"
        conv.add_answer(answer)
        previous = (*turn.messages, {"role": "assistant", "content": answer})


def test_first_turn_has_system_message_of_the_requested_size() -> None:
    conv = Conversation("s", seed=0, count=count)
    turn = conv.next_turn(1000, system_tokens=300)
    assert turn.messages[0]["role"] == "system"
    assert count(turn.messages[0]["content"]) == 300
    assert turn.prompt_tokens == 1000


def test_shrinking_prompt_starts_a_fresh_history() -> None:
    conv = Conversation("s", seed=0, count=count)
    conv.next_turn(2000, system_tokens=100)
    conv.add_answer(" ok")
    turn = conv.next_turn(600, system_tokens=100)
    assert turn.reset
    assert turn.prompt_tokens == 600
    assert [m["role"] for m in turn.messages] == ["system", "user"]


def test_forced_reset_and_answer_overshoot() -> None:
    conv = Conversation("s", seed=0, count=count)
    conv.next_turn(100)
    conv.add_answer(" word word word")  # 7 tokens: the history (107) already passes the target
    turn = conv.next_turn(105)
    assert not turn.reset  # small overshoot: append the minimal message, keep the prefix
    assert count(turn.messages[-1]["content"]) == 3
    assert conv.next_turn(5000, force_reset=True).reset


def test_shared_system_prompt_is_identical_across_sessions() -> None:
    a = Conversation("a", seed=0, count=count, system_seed_key="model-x").next_turn(500, 200)
    b = Conversation("b", seed=0, count=count, system_seed_key="model-x").next_turn(500, 200)
    c = Conversation("c", seed=0, count=count).next_turn(500, 200)
    assert a.messages[0] == b.messages[0]
    assert a.messages[0] != c.messages[0]
    assert a.messages[1] != b.messages[1]


@pytest.mark.parametrize("n", [64, 1000, 20_000])
def test_the_pickers_chars_per_4_estimate_sees_the_engines_token_count(n: int) -> None:
    """The picker estimates a prompt's tokens as ceil(chars / 4) (no tokenizer on its hot path);
    the synthesised text must be what that estimate is made for, else the bench's picker sees
    every prompt and cached prefix shorter than the engines do (single spaces: 0.63x)."""
    from smetric.epp.parse.body import estimate_tokens

    text = synth_text(n, seed=5, count=count)
    assert estimate_tokens(len(text)) == pytest.approx(count(text), rel=0.02, abs=2)
