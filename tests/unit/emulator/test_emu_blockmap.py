"""Hash <-> chained-id interning and the prompt adapter (tokenize, hash, filler)."""

from __future__ import annotations

from smetric.core.blockhash import BlockHasher
from smetric.core.tokenizer import FallbackTokenizer
from smetric.emulator.blockmap import BlockMap, to_pieces
from smetric.emulator.prompt import Prompter


def test_chain_gets_consecutive_ids_and_branch_gets_fresh_base() -> None:
    bm = BlockMap()
    tokens = list(range(64))
    a = bm.intern([11, 12, 13, 14], tokens, 16)
    assert a == [a[0], a[0] + 1, a[0] + 2, a[0] + 3]
    assert to_pieces(a) == ((a[0], a[0] + 3),)
    b = bm.intern([11, 12, 99], tokens[:48], 16)  # shares two blocks, then branches
    assert b[:2] == a[:2] and b[2] not in a
    assert bm.info(b[2]).parent_hash == 12
    assert bm.info(a[1]).token_ids == tuple(range(16, 32))


def test_entries_live_while_cached_or_referenced() -> None:
    bm = BlockMap()
    ids = bm.intern([1, 2], list(range(32)), 16)
    chains = bm.stored(to_pieces(ids))
    assert [[i.block_hash for i in c] for c in chains] == [[1, 2]]
    bm.release(ids)
    assert len(bm) == 2  # still cached
    assert bm.removed(to_pieces(ids)) == [1, 2]
    assert len(bm) == 0
    ids = bm.intern([3], list(range(16)), 16)
    bm.release(ids)  # never cached, no longer referenced
    assert len(bm) == 0


def test_prompter_hashes_match_shared_hasher_and_filler_retokenizes() -> None:
    hasher = BlockHasher(16, "0")
    p = Prompter(FallbackTokenizer(), hasher)
    msgs = [{"role": "user", "content": "def f(x):\n    return x * 2  # " * 20}]
    prompt = p.chat(msgs)
    assert prompt.text == msgs[0]["content"]  # fallback template: raw concatenation
    assert p.block_hashes(prompt.token_ids) == hasher.external_hashes(FallbackTokenizer().encode(prompt.text))
    answer = p.filler_text(11)
    assert FallbackTokenizer().encode(answer) == [p.filler_token_id(k) for k in range(11)]
    # The next turn's prompt starts with prompt + answer token for token.
    nxt = p.chat([*msgs, {"role": "assistant", "content": answer}, {"role": "user", "content": "more"}])
    full = prompt.token_ids + tuple(p.filler_token_id(k) for k in range(11))
    assert nxt.token_ids[: len(full)] == full


def test_shared_map_counts_instances_and_can_keep_entries() -> None:
    bm = BlockMap()
    ids = bm.intern([1], list(range(16)), 16)
    bm.stored(to_pieces(ids))  # instance A
    bm.stored(to_pieces(ids))  # instance B
    bm.release(ids)
    bm.removed(to_pieces(ids))  # A evicts; B still holds it
    assert len(bm) == 1
    bm.removed(to_pieces(ids))
    assert len(bm) == 0
    keep = BlockMap(keep_forever=True)
    keep.release(keep.intern([1], list(range(16)), 16))
    assert len(keep) == 1
