"""vLLM-compatible chained KV-block hashing (prefix-cache keys), shared by the picker and the emulator.

Facts this module reproduces (vLLM v1, ``vllm/v1/core/kv_cache_utils.py`` and ``vllm/utils/hashing.py``):

* A block is ``block_size`` token ids; only *full* blocks are hashed (a trailing partial block is
  never cached, so it never appears in KV events).
* ``hash(block) = H((parent_hash, tuple(token_ids), extra_keys))`` with ``parent_hash`` the previous
  block's hash; the first block's parent is ``NONE_HASH``. ``extra_keys`` is ``None`` for plain text
  prompts (it carries LoRA names, multimodal hashes and the cache salt otherwise).
* ``H`` is chosen by ``--prefix-caching-hash-algo`` (reported in ``vllm:cache_config_info`` as label
  ``prefix_caching_hash_algo``): ``sha256`` = SHA-256 of ``pickle.dumps(obj, HIGHEST_PROTOCOL)`` (the
  engine default), ``sha256_cbor`` = SHA-256 of canonical CBOR (language independent).
* ``NONE_HASH = H(seed)`` where ``seed`` is the *string* value of ``PYTHONHASHSEED``. When the
  variable is unset, recent vLLM uses the fixed seed ``"vllm-none-hash"`` for the SHA-256 algorithms
  (older releases drew 32 random bytes, which no outside party can reproduce: set the seed).
* KV events publish a block hash as an integer: the digest read big-endian, masked to 64 bits
  (``VLLM_KV_EVENTS_USE_INT_BLOCK_HASHES``, on by default), i.e. the digest's last 8 bytes.
"""

from __future__ import annotations

import hashlib
import pickle
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from typing import Any, Literal

import cbor2

HashAlgo = Literal["sha256", "sha256_cbor"]
HASH_ALGOS: tuple[HashAlgo, ...] = ("sha256", "sha256_cbor")
DEFAULT_HASH_ALGO: HashAlgo = "sha256"

# vLLM's seed for NONE_HASH when PYTHONHASHSEED is unset and the algorithm is cryptographic.
DEFAULT_NONE_HASH_SEED = "vllm-none-hash"

_INT_MASK = (1 << 64) - 1


def _sha256_pickle(obj: Any) -> bytes:
    return hashlib.sha256(pickle.dumps(obj, protocol=pickle.HIGHEST_PROTOCOL)).digest()


def _sha256_cbor(obj: Any) -> bytes:
    return hashlib.sha256(cbor2.dumps(obj, canonical=True)).digest()


def hash_function(algo: str) -> Callable[[Any], bytes]:
    """The object hash vLLM uses for ``--prefix-caching-hash-algo=<algo>``; unknown names raise."""
    if algo == "sha256":
        return _sha256_pickle
    if algo == "sha256_cbor":
        return _sha256_cbor
    raise ValueError(f"unsupported prefix-caching hash algorithm {algo!r}; expected one of {HASH_ALGOS}")


def none_hash(seed: str | None, algo: str = DEFAULT_HASH_ALGO) -> bytes:
    """The root parent hash: ``H(seed)``; ``seed=None`` means PYTHONHASHSEED unset (vLLM's default seed)."""
    return hash_function(algo)(DEFAULT_NONE_HASH_SEED if seed is None else seed)


def hash_block_tokens(
    hash_fn: Callable[[Any], bytes],
    parent_hash: bytes,
    token_ids: Sequence[int],
    extra_keys: tuple[Any, ...] | None = None,
) -> bytes:
    """One chained block hash (``parent_hash`` is ``NONE_HASH`` for the first block)."""
    return hash_fn((parent_hash, tuple(token_ids), extra_keys))


def external_hash(digest: bytes) -> int:
    """The integer form vLLM publishes in KV events (low 64 bits of the big-endian digest)."""
    return int.from_bytes(digest, "big") & _INT_MASK


@dataclass(frozen=True, slots=True)
class BlockHasher:
    """Chained block hashes of token sequences with one engine configuration.

    ``seed`` is the PYTHONHASHSEED string shared with the engines (``None`` = unset); ``algo`` the
    engine's ``prefix_caching_hash_algo``; ``block_size`` the engine's KV block size in tokens.
    """

    block_size: int
    seed: str | None = "0"
    algo: str = DEFAULT_HASH_ALGO
    _hash_fn: Callable[[Any], bytes] = field(init=False, repr=False, compare=False)
    _root: bytes = field(init=False, repr=False, compare=False)

    def __post_init__(self) -> None:
        if self.block_size <= 0:
            raise ValueError(f"block_size must be positive, got {self.block_size}")
        fn = hash_function(self.algo)
        object.__setattr__(self, "_hash_fn", fn)
        object.__setattr__(self, "_root", fn(DEFAULT_NONE_HASH_SEED if self.seed is None else self.seed))

    @property
    def root(self) -> bytes:
        """``NONE_HASH`` for this seed and algorithm."""
        return self._root

    def block_hashes(
        self,
        token_ids: Sequence[int],
        extra_keys: tuple[Any, ...] | None = None,
        parent: bytes | None = None,
    ) -> list[bytes]:
        """Digests of every full block of ``token_ids`` (``len(token_ids) // block_size`` of them).
        ``parent``: the digest of the block before ``token_ids`` (default: the root), so a long prompt
        can be hashed piece by piece."""
        fn = self._hash_fn
        bs = self.block_size
        ids = tuple(token_ids)
        parent = self._root if parent is None else parent
        out: list[bytes] = []
        for start in range(0, len(ids) - bs + 1, bs):
            parent = fn((parent, ids[start : start + bs], extra_keys))
            out.append(parent)
        return out

    def external_hashes(self, token_ids: Sequence[int]) -> list[int]:
        """The integer hashes a vLLM engine would publish in ``BlockStored`` for this prompt."""
        return [int.from_bytes(d, "big") & _INT_MASK for d in self.block_hashes(token_ids)]
