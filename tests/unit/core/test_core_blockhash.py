"""vLLM-compatible block hashing: re-derived independently from the documented construction."""

from __future__ import annotations

import hashlib
import pickle

import cbor2
import pytest

from smetric.core.blockhash import (
    DEFAULT_NONE_HASH_SEED,
    BlockHasher,
    external_hash,
    hash_block_tokens,
    hash_function,
    none_hash,
)


def _pickle_sha(obj: object) -> bytes:
    return hashlib.sha256(pickle.dumps(obj, protocol=5)).digest()


def _cbor_sha(obj: object) -> bytes:
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


@pytest.mark.parametrize(("algo", "ref"), [("sha256", _pickle_sha), ("sha256_cbor", _cbor_sha)])
def test_chain_matches_manual_construction(algo: str, ref: object) -> None:
    assert callable(ref)
    hasher = BlockHasher(block_size=4, seed="0", algo=algo)
    tokens = list(range(100, 111))  # 11 tokens -> 2 full blocks, the partial tail is not hashed
    root = ref("0")
    h0 = ref((root, (100, 101, 102, 103), None))
    h1 = ref((h0, (104, 105, 106, 107), None))
    assert hasher.root == root == none_hash("0", algo)
    assert hasher.block_hashes(tokens) == [h0, h1]
    assert hash_block_tokens(hash_function(algo), h0, [104, 105, 106, 107]) == h1


def test_cbor_form_is_canonical_array_of_three() -> None:
    # (parent bytes, token tuple, None) must encode as a CBOR array(3): 0x83, bytes(32) 0x58 0x20 ...
    encoded = cbor2.dumps((b"\x00" * 32, (1, 2), None), canonical=True)
    assert encoded[:3] == b"\x83\x58\x20"
    assert encoded[-4:] == b"\x82\x01\x02\xf6"


def test_external_hash_is_low_64_bits_big_endian() -> None:
    digest = bytes(range(32))
    assert external_hash(digest) == int.from_bytes(digest[-8:], "big")
    hasher = BlockHasher(block_size=2, seed="7")
    assert hasher.external_hashes([1, 2, 3, 4]) == [
        external_hash(d) for d in hasher.block_hashes([1, 2, 3, 4])
    ]
    assert all(0 <= h < 2**64 for h in hasher.external_hashes([1, 2, 3, 4]))


def test_seed_and_prefix_sensitivity() -> None:
    a = BlockHasher(block_size=2, seed="0").block_hashes([1, 2, 3, 4])
    b = BlockHasher(block_size=2, seed="1").block_hashes([1, 2, 3, 4])
    c = BlockHasher(block_size=2, seed="0").block_hashes([9, 2, 3, 4])
    assert a[0] != b[0]
    assert a[1] != c[1]  # block 1 has the same tokens but a different parent
    assert BlockHasher(block_size=2, seed="0").block_hashes([1, 2, 3, 4, 5]) == a


def test_unset_seed_uses_vllm_default() -> None:
    assert BlockHasher(block_size=2, seed=None).root == _pickle_sha(DEFAULT_NONE_HASH_SEED)


def test_short_prompt_has_no_blocks_and_bad_config_raises() -> None:
    assert BlockHasher(block_size=16).block_hashes([1, 2, 3]) == []
    with pytest.raises(ValueError, match="block_size"):
        BlockHasher(block_size=0)
    with pytest.raises(ValueError, match="unsupported"):
        BlockHasher(block_size=16, algo="md5")


def test_golden_vectors_are_stable() -> None:
    # Frozen outputs: a change here breaks agreement with engines hashed by an older build.
    hasher = BlockHasher(block_size=4, seed="0", algo="sha256_cbor")
    assert hasher.root.hex() == _cbor_sha("0").hex()
    assert hasher.external_hashes([1, 2, 3, 4]) == [2164874634404590027]
    pickled = BlockHasher(block_size=4, seed="0", algo="sha256")
    assert pickled.external_hashes([1, 2, 3, 4]) == [10362225831949560093]
