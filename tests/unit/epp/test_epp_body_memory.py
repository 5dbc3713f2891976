"""What one many-message agent body costs the picker after parsing, with the precise index.

A 15.5 MiB chat body of ~250k short messages (an agent's transcript) is parsed and keyed exactly
as the request path does for a large body (``offload._parse_and_key``: parse, render, tokenize,
hash), in a fresh interpreter so its peak RSS is this request's alone. Bounds, in multiples of the
raw body: at most 10x at the peak (the parsed JSON document is alive while the prompt is rendered)
and at most 3x held afterwards (the rendered texts and the block hashes; neither the document nor
the prompt's token ids). The picker's body budget admits ``budget / body`` such bodies at a time and
parses ``--parse-workers`` at once, so these two figures bound what the budget lets through.
"""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import orjson

from smetric.bench.chaos.bodies import agent_messages

BODY_BYTES = int(15.5 * 1024 * 1024)
PEAK_X = 10.0
HELD_X = 3.0

MEASURE = """
import gc, json, os, sys
from smetric.core.blockhash import BlockHasher
from smetric.core.tokenizer import load_tokenizer
from smetric.epp.index.precise import PreciseIndex
from smetric.epp.kvevents.store import BlockStore
from smetric.epp.server.offload import _parse_and_key

def rss():
    with open("/proc/self/statm") as f:
        return int(f.read().split()[1]) * os.sysconf("SC_PAGE_SIZE")

body = open(sys.argv[1], "rb").read()
tok = load_tokenizer("")
index = PreciseIndex(tok, BlockHasher(16, "0"), BlockStore())
index.key("warm up " * 100)
gc.collect()
base = rss()
parsed, text, key = _parse_and_key(body, "/v1/chat/completions", lambda p: (t := tok.render_chat(p.messages), index.key(t)))
gc.collect()
# VmHWM is this address space's high-water mark; ru_maxrss is not: Linux carries the parent's peak
# across the fork/exec that started this interpreter, so it read the test runner's size.
with open("/proc/self/status") as f:
    peak = next(int(line.split()[1]) * 1024 for line in f if line.startswith("VmHWM:"))
print(json.dumps({"held": rss() - base, "peak": peak - base, "messages": len(parsed.messages),
                  "tokens": key.prompt_tokens, "blocks": len(key.block_keys)}))
"""


def agent_body(target_bytes: int) -> tuple[bytes, int]:
    """A chat body of the chaos rows' agent messages filling ``target_bytes``, and their count."""
    messages = agent_messages(target_bytes)
    return orjson.dumps({"model": "m", "stream": True, "messages": messages}), len(messages)


def test_a_many_message_body_costs_a_bounded_multiple_of_its_bytes(tmp_path: Path) -> None:
    body, n = agent_body(BODY_BYTES)
    path = tmp_path / "body.json"
    path.write_bytes(body)
    out = subprocess.run(
        [sys.executable, "-c", MEASURE, str(path)], capture_output=True, text=True, timeout=300
    )
    assert out.returncode == 0, out.stderr[-3000:]
    m = json.loads(out.stdout)
    assert n > 200_000 and m["messages"] == 0  # the document is released once the key is made
    assert m["tokens"] > 4_000_000 and m["blocks"] == m["tokens"] // 16
    assert m["peak"] <= PEAK_X * len(body), (
        f"peak {m['peak'] / 2**20:.0f} MiB for a {len(body) / 2**20:.1f} MiB body"
    )
    assert m["held"] <= HELD_X * len(body), (
        f"held {m['held'] / 2**20:.0f} MiB for a {len(body) / 2**20:.1f} MiB body"
    )


def test_piecewise_tokenizing_and_hashing_equals_the_whole_prompt() -> None:
    from smetric.core.blockhash import BlockHasher
    from smetric.core.tokenizer import FallbackTokenizer
    from smetric.epp.index.precise import ENCODE_CHUNK_CHARS, PreciseIndex, encode_pieces
    from smetric.epp.kvevents.store import BlockStore

    tok = FallbackTokenizer()
    text = "".join(f"turn {i}: résumé  of\tstep_{i}, x=({i}*3)!\n  " for i in range(40_000))
    assert len(text) > 10 * ENCODE_CHUNK_CHARS
    whole = tok.encode(text)
    for chunk in (1, 7, 4096):
        assert [t for piece in encode_pieces(tok, text, chunk) for t in piece] == whole
    hasher = BlockHasher(16, "0")
    key = PreciseIndex(tok, hasher, BlockStore()).key(text)
    assert key.prompt_tokens == len(whole) and key.exact_tokens and key.token_ids == ()
    assert list(key.block_keys) == hasher.external_hashes(whole)
