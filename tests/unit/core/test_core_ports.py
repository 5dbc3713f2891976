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
    """The draw lands on a held port first: the bindable check skips it for the next draw."""
    held = socket.socket()
    busy = ports.free_port()
    held.bind(("127.0.0.1", busy))
    draws = iter([busy - ports.LOWEST, busy - ports.LOWEST + 1])
    monkeypatch.setattr(ports.secrets, "randbelow", lambda n: next(draws))
    try:
        assert ports.free_port() == busy + 1
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
