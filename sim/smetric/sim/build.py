"""What one simulator run is built from its :class:`~smetric.sim.config.SimConfig`: the policies'
shared parameters (:func:`policy_params`, the P/D pool's too) and the cluster of engine instances
(:func:`build_cluster`)."""

from __future__ import annotations

from smetric.core.presets import InstancePreset
from smetric.engine import EngineConfig, Instance, StepModel, make_global_tier
from smetric.engine.global_tier import instances_per_node, tier_segment_tokens
from smetric.policy import DecodeStepModel, PolicyParams, fetch_s_per_token
from smetric.sim.config import SimConfig


def policy_params(cfg: SimConfig, preset: InstancePreset, block_tokens: int) -> PolicyParams:
    fetch_s = (
        fetch_s_per_token(preset.model.kv_bytes_per_token, cfg.global_load_link_gbit_s(preset))
        if cfg.global_aware_slo and cfg.global_tier != "none"
        else None
    )
    return PolicyParams(
        mode="colocated" if cfg.mode == "colocated" else "disaggregated",
        slo=preset.slo,
        cost_model=preset.cost_model,
        decode_step=DecodeStepModel.from_preset_name(preset.name),
        block_tokens=block_tokens,
        seed=cfg.seed,
        global_fetch_s_per_token=fetch_s,
        global_segment_tokens=tier_segment_tokens(cfg.global_tier, preset, cfg.instances, block_tokens),
        global_chunk_tokens=cfg.global_chunk_tokens,
        own=cfg.own_params,
    )


def build_cluster(cfg: SimConfig, preset: InstancePreset, block_tokens: int) -> list[Instance]:
    model = StepModel.from_preset(preset)
    tier = make_global_tier(
        cfg.global_tier, preset, cfg.instances, block_tokens, cfg.nic_gbit_s, cfg.global_path
    )
    per_node = instances_per_node(preset)
    return [
        Instance(
            f"instance-{i}",
            model,
            EngineConfig.from_preset(
                preset, block_tokens, decode=cfg.mode == "colocated", node=i // per_node
            ),
            tier,
        )
        for i in range(cfg.instances)
    ]
