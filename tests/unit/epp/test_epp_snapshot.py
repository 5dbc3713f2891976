"""A restarted or new picker gets the warm one's prefix index (file or peer)."""

from __future__ import annotations

from pathlib import Path

from smetric.epp.envoy import free_port
from smetric.epp.index.approximate import ApproximateIndex
from smetric.epp.server.snapshot import StateKeeper, dump, load

EPS = ("10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000")


def warm() -> tuple[ApproximateIndex, list[str]]:
    index = ApproximateIndex(block_tokens=16)
    prompts = [f"session {i} " + "tool output " * 300 for i in range(12)]
    for i, p in enumerate(prompts):
        index.on_routed(index.key(p), EPS[i % 3])
    return index, prompts


def hits(index: ApproximateIndex, prompts: list[str]) -> list[dict[str, int]]:
    return [index.local_hits(index.key(p + " next turn"), EPS) for p in prompts]


def test_a_fresh_index_loaded_from_a_snapshot_gives_the_same_hits() -> None:
    index, prompts = warm()
    fresh = ApproximateIndex(block_tokens=16)
    assert hits(fresh, prompts) != hits(index, prompts)  # amnesia: without the snapshot, a restart
    assert load(fresh, dump(index), "test")
    assert hits(fresh, prompts) == hits(index, prompts)
    other = ApproximateIndex(block_tokens=32)  # another block size: ignored, not misread
    assert not load(other, dump(index), "test") and not load(other, b"{garbage", "test")


async def test_state_file_survives_a_restart_and_a_peer_serves_a_new_replica(tmp_path: Path) -> None:
    index, prompts = warm()
    state = tmp_path / "state.json"
    port = free_port()
    keeper = StateKeeper(index, str(state), 60.0, serve_port=port, host="127.0.0.1")
    await keeper.start()
    try:
        peer_fed = ApproximateIndex(block_tokens=16)
        source = await StateKeeper(peer_fed, peers=(f"127.0.0.1:{port}", "127.0.0.1:1")).restore()
        assert source.endswith("/snapshot") and hits(peer_fed, prompts) == hits(index, prompts)
    finally:
        await keeper.stop()  # writes the final snapshot
    restarted = ApproximateIndex(block_tokens=16)
    assert await StateKeeper(restarted, str(state), peers=("127.0.0.1:1",)).restore() == str(state)
    assert hits(restarted, prompts) == hits(index, prompts)
