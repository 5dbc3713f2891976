"""Cost of the prefix indexes on one large prompt: ``python -m smetric.epp.index.timing [--mb 1]``.

Prints milliseconds per call of ``key()`` (tokenize + hash, or char-block hash) and of
``local_hits()`` over ``--endpoints`` endpoints, where one endpoint holds the whole prompt and the
others only its first blocks (a shared system prompt) -- the picker's per-request work.
"""

from __future__ import annotations

import argparse
import random
import time
from collections.abc import Callable

from smetric.core.blockhash import BlockHasher
from smetric.core.tokenizer import FallbackTokenizer
from smetric.epp.contracts import PrefixIndex, PromptKey
from smetric.epp.index.approximate import ApproximateIndex
from smetric.epp.index.precise import PreciseIndex
from smetric.epp.kvevents.events import BlockStored
from smetric.epp.kvevents.store import BlockStore


def _prompt(n_bytes: int, seed: int = 0) -> str:
    rng = random.Random(seed)
    words = ["def", "return", "self", "value", "cache", "(x)", "for", "in", "range", "\n    ", "import", "42"]
    out: list[str] = []
    size = 0
    while size < n_bytes:
        w = rng.choice(words)
        out.append(w)
        size += len(w) + 1
    return " ".join(out)[:n_bytes]


def _time_ms(fn: Callable[[], object], repeat: int) -> float:
    best = float("inf")
    for _ in range(repeat):
        t0 = time.perf_counter()
        fn()
        best = min(best, time.perf_counter() - t0)
    return best * 1e3


def _measure(
    name: str, index: PrefixIndex, text: str, endpoints: int, fill: Callable[[PromptKey], None]
) -> None:
    addresses = [f"10.0.0.{i}:8000" for i in range(endpoints)]
    key = index.key(text)
    fill(key)
    key_ms = _time_ms(lambda: index.key(text), 3)
    hits_ms = _time_ms(lambda: index.local_hits(key, addresses), 5)
    hits = index.local_hits(key, addresses)
    print(
        f"{name:12s} prompt={len(text) / 1e6:.2f} MB tokens={key.prompt_tokens} blocks={len(key.block_keys)} "
        f"key={key_ms:.1f} ms local_hits({endpoints} endpoints)={hits_ms:.2f} ms max_hit={max(hits.values())}"
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__)
    parser.add_argument("--mb", type=float, default=1.0)
    parser.add_argument("--endpoints", type=int, default=32)
    parser.add_argument("--block-size", type=int, default=16)
    args = parser.parse_args()
    text = _prompt(int(args.mb * 1e6))

    store = BlockStore()
    precise = PreciseIndex(FallbackTokenizer(), BlockHasher(args.block_size, "0"), store)

    def fill_precise(key: PromptKey) -> None:
        store.apply("10.0.0.0:8000", [BlockStored(key.block_keys, None, args.block_size, "GPU")])
        for i in range(1, args.endpoints):
            store.apply(f"10.0.0.{i}:8000", [BlockStored(key.block_keys[:64], None, args.block_size, "GPU")])

    _measure("precise", precise, text, args.endpoints, fill_precise)

    approx = ApproximateIndex(block_tokens=args.block_size, default_capacity_blocks=1 << 20)

    def fill_approx(key: PromptKey) -> None:
        approx.on_routed(key, "10.0.0.0:8000")
        short = PromptKey(key.text[:1], 1, block_keys=key.block_keys[:64])
        for i in range(1, args.endpoints):
            approx.on_routed(short, f"10.0.0.{i}:8000")

    _measure("approximate", approx, text, args.endpoints, fill_approx)


if __name__ == "__main__":
    main()
