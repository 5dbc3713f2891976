"""Mooncake (session inference), Bailian, Azure loaders and format detection on crafted files."""

from __future__ import annotations

import gzip
import json
from pathlib import Path
from typing import Any

import pytest

from smetric.trace.errors import TraceFormatError
from smetric.trace.formats import detect_format, load_trace
from smetric.trace.mooncake import load_mooncake


def write_jsonl(path: Path, rows: list[Any], gz: bool = False) -> Path:
    text = "\n".join(r if isinstance(r, str) else json.dumps(r) for r in rows) + "\n"
    path.write_bytes(gzip.compress(text.encode()) if gz else text.encode())
    return path


def mc(ts_ms: float, inp: int, out: int, hashes: list[int]) -> dict[str, Any]:
    return {"timestamp": ts_ms, "input_length": inp, "output_length": out, "hash_ids": hashes}


# Block 0 is a system prompt every request shares. Sessions: A = 0,2,5 ; B = 1,4 ; C = 3 (shares
# only block 0 with A, i.e. not a follow-up); request 6 extends A's second turn (a branch of A).
MOONCAKE = [
    mc(0, 1100, 10, [0, 1, 2]),  # 0 A
    mc(500, 600, 20, [0, 10]),  # 1 B
    mc(2000, 1700, 30, [0, 1, 2, 3]),  # 2 A extends 0 beyond block 0
    mc(2500, 900, 5, [0, 20]),  # 3 C: shares only the system block
    mc(3000, 1500, 5, [0, 10, 11]),  # 4 B
    mc(7000, 2100, 5, [0, 1, 2, 3, 4]),  # 5 A
    mc(9000, 2050, 5, [0, 1, 2, 3, 9]),  # 6 A again: deepest shared block 3 -> latest holder is 5
]


def test_mooncake_infers_sessions_by_prefix_extension(tmp_path: Path) -> None:
    trace = load_mooncake(write_jsonl(tmp_path / "m.jsonl.gz", MOONCAKE, gz=True))
    assert trace.sessions_inferred and trace.format == "mooncake" and trace.block_tokens == 512
    sessions = [r.session_id for r in trace]
    a, b, c = sessions[0], sessions[1], sessions[3]
    assert sessions == [a, b, a, c, b, a, a] and len({a, b, c}) == 3
    assert [r.prev_index for r in trace] == [-1, -1, 0, -1, 1, 2, 5]
    assert [r.turn for r in trace] == [0, 0, 1, 0, 1, 2, 3]
    assert [r.offset_s for r in trace] == [0.0, 0.0, 2.0, 0.0, 2.5, 7.0, 9.0]
    assert trace.recorded_family_starts_s == {a: 0.0, b: 0.5, c: 2.5}
    assert trace.requests[2].est_hit_tokens == 1110  # 1100 prompt + 10 output
    assert [r.system_blocks for r in trace] == [1, 1, 0, 1, 0, 0, 0]
    assert [r.trigger for r in trace][:3] == ["first", "first", "unknown"]
    assert [r.think_time_recorded for r in trace] == [r.prev_index < 0 for r in trace]
    assert any("inferred" in n and "1-block shared system prefix (detected)" in n for n in trace.notes)
    # a partial last block is hashed: 1100 tokens = 512 + 512 + 76
    assert trace.requests[0].block_token_counts(512).tolist() == [512, 512, 76]


def test_mooncake_system_blocks_override_and_drop(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", MOONCAKE)
    flat = load_mooncake(path, system_blocks=0)  # block 0 alone now links everything
    assert len({r.session_id for r in flat}) == 1
    dropped = load_mooncake(path, max_context_tokens=2090)  # drops request 5 (2100 tokens)
    assert dropped.dropped_over_context == 1 and len(dropped) == 6
    # request 6 continued 5; it now links to 5's kept predecessor (request 2) and keeps its turn
    assert dropped.requests[-1].prev_index == 2 and dropped.requests[-1].turn == 3


def test_mooncake_rejects_too_many_hashes(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "m.jsonl", [mc(0, 512, 1, [0, 1])])
    with pytest.raises(TraceFormatError, match=r"m\.jsonl:1: 2 hash_ids exceed"):
        load_mooncake(path)


def bl(chat: int, parent: int, ts: float, inp: int, hashes: list[int], turn: int = 1) -> dict[str, Any]:
    return {
        "chat_id": chat,
        "parent_chat_id": parent,
        "timestamp": ts,
        "input_length": inp,
        "output_length": 7,
        "type": "text",
        "turn": turn,
        "hash_ids": hashes,
    }


def test_bailian_sessions_from_parent_links(tmp_path: Path) -> None:
    rows = [
        bl(10, -1, 100.0, 40, [1, 2, 3]),
        bl(11, -1, 101.0, 20, [1, 5]),
        bl(12, 10, 105.5, 70, [1, 2, 3, 4, 6], turn=2),
        bl(13, 99, 106.0, 32, [1, 8]),  # parent not in the file: own session
        bl(14, 12, 110.0, 90, [1, 2, 3, 4, 6, 7], turn=3),
    ]
    trace = load_trace(write_jsonl(tmp_path / "b.jsonl", rows))
    assert trace.format == "bailian" and trace.block_tokens == 16 and not trace.sessions_inferred
    assert [r.session_id for r in trace] == ["chat10", "chat11", "chat10", "chat13", "chat10"]
    assert [r.prev_index for r in trace] == [-1, -1, 0, -1, 2]
    assert [r.turn for r in trace] == [0, 0, 1, 0, 2]
    assert trace.requests[4].offset_s == 10.0 and trace.requests[2].est_hit_tokens == 47
    assert trace.recorded_family_starts_s == {"chat10": 0.0, "chat11": 1.0, "chat13": 6.0}
    assert any("1 started by a request whose parent is not in the file" in n for n in trace.notes)
    assert [r.system_blocks for r in trace] == [1, 1, 0, 1, 0]


def test_bailian_duplicate_chat_id(tmp_path: Path) -> None:
    path = write_jsonl(tmp_path / "b.jsonl", [bl(1, -1, 0.0, 16, [1]), bl(1, -1, 1.0, 16, [2])])
    with pytest.raises(TraceFormatError, match=r"b\.jsonl:2: duplicate chat_id 1"):
        load_trace(path)
    assert len(load_trace(path, on_error="skip")) == 1


AZURE = "TIMESTAMP,ContextTokens,GeneratedTokens\n" + "\n".join(
    [
        "2023-11-16 18:17:03.9799600,4808,10",
        "2023-11-16 18:17:04.0319600,3180,8",
        "2023-11-16 18:18:03.9799600,100,1",
    ]
)


def test_azure_each_request_its_own_session(tmp_path: Path) -> None:
    path = tmp_path / "az.csv"
    path.write_text(AZURE + "\n")
    trace = load_trace(path, max_context_tokens=4000)
    assert trace.format == "azure" and not trace.has_hashes and not trace.has_sessions
    assert trace.block_tokens == 0 and len(trace) == 2 and trace.dropped_over_context == 1
    assert [r.prompt_tokens for r in trace] == [3180, 100]
    assert sorted(trace.recorded_family_starts_s.values()) == pytest.approx([0.052, 60.0])
    assert all(r.n_blocks == 0 and r.prev_index == -1 for r in trace)


def test_azure_bad_row_and_header(tmp_path: Path) -> None:
    path = tmp_path / "az.csv"
    path.write_text(AZURE + "\nnot-a-date,1,2\n")
    with pytest.raises(TraceFormatError, match=r"az\.csv:5: invalid azure row"):
        load_trace(path)
    assert load_trace(path, on_error="skip").skipped_malformed == 1
    path.write_text("a,b,c\n1,2,3\n")
    with pytest.raises(TraceFormatError, match="expected header"):
        load_trace(path, format="azure")


def test_detection_and_override(tmp_path: Path) -> None:
    agentic = {"sid": "s", "turn": 0, "t": 0, "inp": 64, "out": 1, "hash_ranges": [[1, 1]]}
    assert detect_format(write_jsonl(tmp_path / "x.gz", [agentic], gz=True)) == "agentic"
    assert detect_format(write_jsonl(tmp_path / "y.jsonl", MOONCAKE)) == "mooncake"
    azure = tmp_path / "z.txt"
    azure.write_text(AZURE)
    assert detect_format(azure) == "azure"
    unknown = write_jsonl(tmp_path / "u.jsonl", [{"foo": 1}])
    with pytest.raises(TraceFormatError, match="unrecognised JSON trace record"):
        detect_format(unknown)
    garbage = tmp_path / "g.bin"
    garbage.write_bytes(b"\x00\x01hello")
    with pytest.raises(TraceFormatError, match="cannot detect"):
        load_trace(garbage)
    # an explicit format wins over detection, and then the content is validated as that format
    with pytest.raises(TraceFormatError, match="invalid agentic record"):
        load_trace(tmp_path / "y.jsonl", format="agentic")
    with pytest.raises(ValueError, match="unknown trace format"):
        load_trace(tmp_path / "y.jsonl", format="parquet")
    with pytest.raises(ValueError, match="agentic format only"):
        load_trace(tmp_path / "y.jsonl", share_system_prompt=True)


def test_truncated_gzip_is_a_clear_error(tmp_path: Path) -> None:
    data = gzip.compress(("\n".join(json.dumps(r) for r in MOONCAKE * 50) + "\n").encode())
    path = tmp_path / "cut.jsonl.gz"
    path.write_bytes(data[: len(data) // 2])
    with pytest.raises(TraceFormatError, match="cannot read"):
        load_trace(path, format="mooncake")


def test_corrupt_gzip_is_a_clear_error(tmp_path: Path) -> None:
    data = bytearray(gzip.compress(("\n".join(json.dumps(r) for r in MOONCAKE * 50) + "\n").encode()))
    data[len(data) // 2 : len(data) // 2 + 8] = b"\xff" * 8
    path = tmp_path / "bad.jsonl.gz"
    path.write_bytes(bytes(data))
    with pytest.raises(TraceFormatError):
        load_trace(path, format="mooncake")


def test_a_trace_format_error_survives_pickling() -> None:
    """A process pool sends a worker's exception to its parent pickled: unpickling must rebuild it
    (it did not, and the pool died with BrokenProcessPool instead of the trace's one line)."""
    import pickle

    err = TraceFormatError("/x/t.jsonl", 3, "unrecognised JSON trace record")
    back = pickle.loads(pickle.dumps(err))
    assert isinstance(back, TraceFormatError)
    assert (str(back), back.path, back.line, back.message) == (str(err), "/x/t.jsonl", 3, err.message)
