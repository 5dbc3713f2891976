"""Instance model shared by the cluster simulator and the real-time emulator.

API (engine time is seconds, any origin; the caller owns the clock)::

    from smetric.engine import EngineConfig, EngineRequest, Instance, StepModel, make_global_tier

    model = StepModel.from_preset(preset)                      # roofline step times
    tier = make_global_tier("full", preset, n_instances, block_tokens)   # or None
    inst = Instance("pod-0", model, EngineConfig.from_preset(preset, block_tokens), tier, kv_events)
    inst.local_hit_tokens(req)          # c[i] for the router (GPU tier, longest cached prefix)
    inst.submit(req, now_s)             # arrival; requires now_s >= previous calls' times
    inst.next_event_s()                 # when the next first-token/finish/step boundary happens
    events = inst.advance(until_s)      # EngineEvent("first_token" | "finished", time_s, ...)
    inst.num_running, inst.num_waiting, inst.kv_usage   # vLLM's three gauges

A discrete-event simulator calls ``advance(next_event_s())``; a wall-clock driver calls
``advance(scaled_now)`` periodically (or sleeps until ``next_event_s()``). ``kv_events`` (a
:class:`KvEventSink`, optional) receives stored/removed block-id pieces for vLLM KV events.
"""

from smetric.engine.global_tier import GLOBAL_TIER_KINDS, GlobalTier, make_global_tier
from smetric.engine.prefix_cache import BlockCache, KvEventSink, Piece, count_blocks, slice_blocks
from smetric.engine.request import EngineEvent, EngineRequest, RequestTiming, pieces_from_ranges
from smetric.engine.roofline import StepModel
from smetric.engine.scheduler import EngineConfig, Instance

__all__ = [
    "GLOBAL_TIER_KINDS",
    "BlockCache",
    "EngineConfig",
    "EngineEvent",
    "EngineRequest",
    "GlobalTier",
    "Instance",
    "KvEventSink",
    "Piece",
    "RequestTiming",
    "StepModel",
    "count_blocks",
    "make_global_tier",
    "pieces_from_ranges",
    "slice_blocks",
]
