"""Prefix indexes: precise (engine block hashes + KV events) and approximate (learned from routing)."""

from __future__ import annotations

import random

from smetric.core.blockhash import BlockHasher
from smetric.core.tokenizer import FallbackTokenizer
from smetric.epp.index.approximate import ApproximateIndex
from smetric.epp.index.precise import PreciseIndex
from smetric.epp.index.prefix import cached_prefix_blocks
from smetric.epp.kvevents.events import BlockRemoved, BlockStored
from smetric.epp.kvevents.store import BlockStore


def test_cached_prefix_blocks() -> None:
    keys = [10, 11, 12, 13]
    assert cached_prefix_blocks(keys, set()) == 0
    assert cached_prefix_blocks(keys, {10, 11}) == 2
    assert cached_prefix_blocks(keys, {10, 11, 12, 13, 99}) == 4
    assert cached_prefix_blocks(keys, {11, 12}) == 0  # a chain is only usable from its first block
    assert cached_prefix_blocks(keys, {10, 12, 13}) == 1
    assert cached_prefix_blocks([], {1}) == 0


def _precise(block_size: int = 4) -> tuple[PreciseIndex, BlockStore, BlockHasher]:
    store = BlockStore()
    hasher = BlockHasher(block_size=block_size, seed="0")
    return PreciseIndex(FallbackTokenizer(), hasher, store), store, hasher


def test_precise_hits_follow_kv_events() -> None:
    index, store, hasher = _precise()
    tokens = list(range(1, 15))  # 14 tokens -> 3 full blocks of 4
    key = index.key("ignored when ids are given", tokens)
    assert key.prompt_tokens == 14 and len(key.block_keys) == 3
    assert key.block_keys == tuple(hasher.external_hashes(tokens))
    store.apply("a", [BlockStored(key.block_keys[:2], None, 4, "GPU")])
    store.apply("b", [BlockStored(key.block_keys, None, 4, "GPU")])
    assert index.local_hits(key, ["a", "b", "c"]) == {"a": 8, "b": 12, "c": 0}
    store.apply("b", [BlockRemoved(key.block_keys[1:], "GPU")])
    assert index.local_hits(key, ["b"]) == {"b": 4}


def test_precise_tokenizes_text_and_extends_prefix() -> None:
    index, store, _ = _precise(block_size=2)
    first = index.key("You are a helpful assistant. Fix the bug in foo.py please.")
    store.apply("a", [BlockStored(first.block_keys, None, 2, "GPU")])
    follow = index.key(first.text + " Done. Now add a test for it.")
    assert follow.block_keys[: len(first.block_keys) - 1] == first.block_keys[:-1]
    hits = index.local_hits(follow, ["a"])["a"]
    assert 2 * (len(first.block_keys) - 1) <= hits <= 2 * len(first.block_keys)
    index.on_routed(follow, "a")  # no-op for the precise index
    assert index.local_hits(follow, ["a"])["a"] == hits


def test_approximate_learns_from_routing() -> None:
    index = ApproximateIndex(block_tokens=4, group_blocks=1)  # 16 bytes per key
    system = "S" * 64
    k1 = index.key(system + "first user question, quite long indeed")
    assert k1.prompt_tokens == -(-len(k1.text) // 4)
    assert index.local_hits(k1, ["a", "b"]) == {"a": 0, "b": 0}
    index.on_routed(k1, "a")
    assert index.local_hits(k1, ["a"])["a"] == 4 * len(k1.block_keys)
    k2 = index.key(k1.text + " answer and a follow-up question")
    assert index.local_hits(k2, ["a", "b"]) == {"a": 4 * len(k1.block_keys), "b": 0}
    other = index.key(system + "a different question entirely, from another session")
    assert index.local_hits(other, ["a"])["a"] == 16  # the shared 64-byte system prompt
    index.forget("a")
    assert index.local_hits(k1, ["a"])["a"] == 0


def test_approximate_lru_evicts_tails_first_within_capacity() -> None:
    capacity = {"a": 6}
    index = ApproximateIndex(block_tokens=1, capacity_blocks=capacity.get, chars_per_token=1, group_blocks=1)
    old = index.key("abcdefgh")  # 8 blocks > capacity 6
    index.on_routed(old, "a")
    assert index.size("a") == 6
    assert index.local_hits(old, ["a"])["a"] == 6  # the prefix survived, the tail went
    new = index.key("zyxw")
    index.on_routed(new, "a")
    assert index.size("a") == 6
    assert index.local_hits(new, ["a"])["a"] == 4
    assert index.local_hits(old, ["a"])["a"] == 2


def test_approximate_uses_token_ids_length_when_given() -> None:
    index = ApproximateIndex(block_tokens=4)
    assert index.key("x" * 40, token_ids=[1, 2, 3]).prompt_tokens == 3
    assert index.key("").block_keys == ()


def test_precise_key_messages_renders_like_the_engine() -> None:
    index, _, _ = _precise()
    msgs = [{"role": "user", "content": "hello there"}, {"role": "assistant", "content": "hi"}]
    assert index.key_messages(msgs) == index.key("hello therehi")  # fallback: raw concatenation


def test_approximate_groups_blocks_per_key() -> None:
    capacity = {"a": 10}  # engine blocks: 3 keys of 4 blocks
    index = ApproximateIndex(block_tokens=2, capacity_blocks=capacity.get, chars_per_token=1)
    key = index.key("x" * 40)  # 40 bytes, 8 bytes per key: 5 keys
    assert len(key.block_keys) == 5 and key.prompt_tokens == 40
    index.on_routed(key, "a")
    assert index.size("a") == 3
    assert index.local_hits(key, ["a"])["a"] == 24  # 3 keys x 4 blocks x 2 tokens
    assert index.local_hits(index.key("x" * 15), ["a"])["a"] == 8  # one whole key; a partial one counts 0


def test_approximate_keys_are_prefix_keys_and_deterministic() -> None:
    index = ApproximateIndex(block_tokens=4, group_blocks=1)
    a = index.key("abcdefghijklmnop" * 8)
    b = index.key("abcdefghijklmnop" * 4 + "ABCDEFGHIJKLMNOP" * 4)
    assert a.block_keys[:4] == b.block_keys[:4] and not set(a.block_keys[4:]) & set(b.block_keys)
    swapped = index.key("0123456789abcdef" + "abcdefghijklmnop" + "abcdefghijklmnop" * 6)
    moved = index.key("abcdefghijklmnop" + "0123456789abcdef" + "abcdefghijklmnop" * 6)
    assert not set(swapped.block_keys) & set(moved.block_keys)  # a block's position is in every key
    assert len(set(a.block_keys)) == len(a.block_keys)  # repeated text still gets distinct keys
    assert ApproximateIndex(block_tokens=4, group_blocks=1).key(a.text).block_keys == a.block_keys


def test_approximate_binary_search_matches_a_linear_scan_under_random_traffic() -> None:
    """The hit search relies on each LRU being prefix-closed; check it against takewhile."""
    rng = random.Random(3)
    capacity = {"a": 40}
    index = ApproximateIndex(block_tokens=1, capacity_blocks=capacity.get, chars_per_token=1, group_blocks=1)
    stems = ["".join(rng.choice("ab") for _ in range(24)) for _ in range(6)]
    for _ in range(300):
        text = rng.choice(stems)[: rng.randint(1, 24)] + "".join(
            rng.choice("abc") for _ in range(rng.randint(0, 12))
        )
        key = index.key(text)
        lru = index._lrus.get("a")
        linear = cached_prefix_blocks(key.block_keys, lru.keys) if lru is not None else 0
        assert index.local_hits(key, ["a"])["a"] == linear
        if rng.random() < 0.7:
            index.on_routed(key, "a")
        assert index.size("a") <= 40
