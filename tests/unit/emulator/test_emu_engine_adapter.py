"""The emulator's engine adapter keeps every event across ``submit``."""

from __future__ import annotations

from smetric.core.presets import get_preset
from smetric.emulator.engine_adapter import SafeInstance
from smetric.engine import EngineConfig, EngineRequest, StepModel


def test_events_passed_over_by_submit_are_not_lost() -> None:
    preset = get_preset("qwen3-30b-h20")
    inst = SafeInstance("i", StepModel.from_preset(preset), EngineConfig(16, 1000, 8192, 256))
    inst.submit(EngineRequest("a", 100, 4, ((0, 5),)), 0.0)
    # The next call happens long after "a" finished: submit itself advances over its events.
    inst.submit(EngineRequest("b", 100, 4, ((100, 105),)), 10.0)
    events = inst.advance(10.0)
    assert [(e.kind, e.request.request_id) for e in events] == [("first_token", "a"), ("finished", "a")]
    kinds = [(e.kind, e.request.request_id) for e in inst.advance(20.0)]
    assert kinds == [("first_token", "b"), ("finished", "b")]
