"""``smetric-epp`` refuses, in one line before any server starts, a state file it could never write
(it would otherwise serve and log a warning every --state-interval-ms)."""

from __future__ import annotations

from pathlib import Path

import pytest

from smetric.epp import main as epp_main


@pytest.mark.parametrize("kind", ["under /proc", "a folder"])
def test_an_unwritable_state_file_is_one_line_before_serving(
    kind: str, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    async def never(*_: object) -> int:
        raise AssertionError("the picker started serving")

    monkeypatch.setattr(epp_main, "serve", never)
    state = "/proc/x/state.json" if kind == "under /proc" else str(tmp_path)
    assert epp_main.main(["--endpoints", "127.0.0.1:1", "--state-file", state]) == 2
    err = capsys.readouterr().err
    assert err.startswith(f"smetric-epp: --state-file {state}: ") and err.count("\n") == 1, err


def test_a_writable_state_file_leaves_nothing_behind_and_serves(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    async def serve(*_: object) -> int:
        return 0

    monkeypatch.setattr(epp_main, "serve", serve)
    state = tmp_path / "sub" / "state.json"
    assert epp_main.main(["--endpoints", "127.0.0.1:1", "--state-file", str(state)]) == 0
    assert not state.exists()
