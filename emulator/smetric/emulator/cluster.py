"""Assemble N emulated instances (engines, metrics, KV publishers, HTTP servers) in one process."""

from __future__ import annotations

import asyncio
import logging
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, replace

import zmq.asyncio
from aiohttp import web

from smetric.core.blockhash import BlockHasher
from smetric.core.stopping import cancel_and_wait
from smetric.core.tokenizer import load_tokenizer
from smetric.emulator.blockmap import BlockMap
from smetric.emulator.config import EmulatorConfig
from smetric.emulator.engine_adapter import SafeInstance
from smetric.emulator.faults import FaultState
from smetric.emulator.instance import EmulatedInstance, KvEventCollector
from smetric.emulator.kv_events import KvEventPublisher
from smetric.emulator.metrics import InstanceMetrics
from smetric.emulator.prompt import Prompter
from smetric.emulator.server import InstanceServer, start_servers, stop_servers
from smetric.engine import EngineConfig, StepModel, make_global_tier
from smetric.engine.global_tier import CALIBRATED, instances_per_node

log = logging.getLogger("smetric.emulator")


def build_instances(config: EmulatorConfig, ctx: zmq.asyncio.Context | None) -> list[EmulatedInstance]:
    """One engine per instance from the preset, sharing one prompter and (optionally) one global
    tier; a KV publisher per instance when ``ctx`` is given and KV events are enabled."""
    preset = config.preset
    prompter = Prompter(load_tokenizer(config.tokenizer), BlockHasher(config.block_size, config.hash_seed))
    step_model = StepModel.from_preset(preset).token_scaled(config.token_cost_scale)
    tier = make_global_tier(
        config.global_tier,
        preset,
        config.instances,
        config.block_size,
        path=replace(CALIBRATED, load_mode=config.global_load_mode),
        token_cost_scale=config.token_cost_scale,
    )
    per_node = instances_per_node(preset)
    shared = BlockMap(keep_forever=True) if tier is not None else None
    out: list[EmulatedInstance] = []
    for i in range(config.instances):
        blocks = shared if shared is not None else BlockMap()
        collector = KvEventCollector(blocks, config.block_size)
        engine_config = EngineConfig(
            block_tokens=config.block_size,
            capacity_blocks=config.num_gpu_blocks,
            max_num_batched_tokens=preset.max_num_batched_tokens,
            max_num_seqs=preset.max_num_seqs,
            node=i // per_node,
        )
        name = f"{config.public_host}:{config.http_port(i)}"
        engine = SafeInstance(name, step_model, engine_config, tier, collector)
        endpoint = config.kv_events_endpoint(i)
        publisher = (
            KvEventPublisher(ctx, endpoint, config.kv_topic(i)) if ctx is not None and endpoint else None
        )
        out.append(
            EmulatedInstance(
                name=name,
                engine=engine,
                blocks=blocks,
                collector=collector,
                prompter=prompter,
                metrics=InstanceMetrics(config.model_name, config.block_size, config.num_gpu_blocks),
                publisher=publisher,
                faults=FaultState(fail_after=config.fail_after),
                time_scale=config.time_scale,
                stream_interval_s=config.stream_interval_s,
            )
        )
    return out


@dataclass
class RunningCluster:
    """Started instances: their driver tasks and HTTP runners (``stop`` tears all down)."""

    instances: list[EmulatedInstance]
    drivers: list[asyncio.Task[None]]
    runners: list[web.AppRunner]
    ctx: zmq.asyncio.Context | None
    executor: ThreadPoolExecutor | None = None

    async def stop(self) -> None:
        await stop_servers(self.runners)
        await cancel_and_wait(*self.drivers)
        for inst in self.instances:
            if inst.publisher is not None:
                inst.publisher.close()
        if self.ctx is not None:
            self.ctx.term()
        if self.executor is not None:
            self.executor.shutdown(wait=False, cancel_futures=True)


async def start_cluster(config: EmulatorConfig) -> RunningCluster:
    ctx = zmq.asyncio.Context() if config.kv_events_port else None
    instances = build_instances(config, ctx)
    # One worker thread for request preparation (tokenize + hash): more threads would only fight
    # the event loop for the GIL and delay the drivers' wake-ups.
    executor = ThreadPoolExecutor(max_workers=1, thread_name_prefix="emu-prepare")
    drivers = [asyncio.create_task(inst.run(), name=f"driver-{inst.name}") for inst in instances]
    servers = [
        (
            InstanceServer(inst, inst.prompter, config.model_name, config.context_tokens, executor),
            config.host,
            config.http_port(i),
        )
        for i, inst in enumerate(instances)
    ]
    runners = await start_servers(servers)
    return RunningCluster(instances, drivers, runners, ctx, executor)
