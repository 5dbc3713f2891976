"""smetric.core.ports.free_port: listener ports drawn below the kernel's ephemeral range, where an
outgoing connection never takes them between the probe and the child's own bind."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest

from smetric.core import ports


def test_ports_are_free_and_below_the_ephemeral_range() -> None:
    low = ports.ephemeral_low()
    drawn = [ports.free_port() for _ in range(200)]
    assert all(ports.LOWEST <= p < low for p in drawn)  # bind(0) would give ports >= low
    assert len(set(drawn)) > 150  # a random draw, not one port again and again
    with socket.socket() as s:
        s.bind(("127.0.0.1", drawn[0]))  # free when drawn


def test_a_port_in_use_is_skipped(monkeypatch: pytest.MonkeyPatch) -> None:
    """The draw lands on a held port first: the bindable check skips it for the next draw.

    The second draw is a port free now and the record is a fresh one: with the process's own
    record, a port an earlier test was handed (or another process holds) made a third draw."""
    held = socket.socket()
    busy = ports.free_port(handed_out=None)
    held.bind(("127.0.0.1", busy))
    nxt = next(p for p in range(busy + 1, busy + 200) if ports.bindable(p))
    draws = iter([busy - ports.LOWEST, nxt - ports.LOWEST])
    monkeypatch.setattr(ports.secrets, "randbelow", lambda n: next(draws))
    try:
        assert ports.free_port(handed_out=ports.HandedOut()) == nxt
    finally:
        held.close()


def test_no_room_below_the_range_falls_back_to_the_kernel(tmp_path: Path) -> None:
    rng = tmp_path / "range"
    rng.write_text("20100 60999\n")  # 100 ports below it: fewer than MIN_SPAN
    port = ports.free_port(range_file=rng)
    assert port > 0
    assert ports.ephemeral_low(tmp_path / "missing") == 32_768
    rng.write_text("garbage")
    assert ports.ephemeral_low(rng) == 32_768


def test_a_port_is_never_handed_out_twice(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two draws before either child binds (a picker's four listeners): the random draw lands on the
    same port twice; the process's record skips it the second time. Guard off (``handed_out=None``):
    the same port comes back, the collision CI stop 40 hit as "address already in use"."""
    record = ports.HandedOut()
    first = ports.free_port(handed_out=record)
    draws = iter([first - ports.LOWEST, first - ports.LOWEST + 1])
    monkeypatch.setattr(ports.secrets, "randbelow", lambda n: next(draws))
    assert ports.free_port(handed_out=record) == first + 1
    monkeypatch.setattr(ports.secrets, "randbelow", lambda n: first - ports.LOWEST)
    assert ports.free_port(handed_out=None) == first  # guard off: the same port again
    monkeypatch.setattr(ports.socket, "socket", _NoKernelPort)
    with pytest.raises(OSError):  # only that port drawn and no kernel fallback: never handed out
        ports.free_port(handed_out=record)


class _NoKernelPort(socket.socket):
    """A socket whose ``bind(0)`` fails: the draw's kernel fallback is out of the picture."""

    def bind(self, address: object) -> None:
        if isinstance(address, tuple) and address[1] == 0:
            raise OSError("no kernel port in this test")
        super().bind(address)  # type: ignore[arg-type]


def test_the_record_forgets_its_oldest_ports() -> None:
    record = ports.HandedOut(limit=3)
    assert record.claim([1, 2])
    assert not record.claim([2, 3])  # all or nothing: 3 not recorded
    assert 3 not in record
    assert record.claim([3, 4])  # 1 forgotten
    assert 1 not in record and all(p in record for p in (2, 3, 4))


def test_blocks_and_ranges_are_recorded() -> None:
    from smetric.bench.procs import free_port_range
    from smetric.emulator.ports import free_port_block

    base = free_port_block(4)
    assert all(p in ports.HANDED_OUT for p in range(base, base + 4))
    start = free_port_range(3, start=base)  # the block is skipped although it is bindable
    assert start >= base + 4
    assert all(p in ports.HANDED_OUT for p in range(start, start + 3))
