"""``smetric simulate``'s global-tier flags: the tier, its path and LMCache's write path (the
defaults are LMCache + Mooncake as measured, docs/simulator.md)."""

from __future__ import annotations

import argparse

from smetric.engine.global_tier import GLOBAL_TIER_KINDS, LOAD_MODES, PLACEMENTS


def global_tier_flags(p: argparse.ArgumentParser) -> None:
    """The global KV tier and its path (LMCache + Mooncake)."""
    p.add_argument("--global-tier", choices=GLOBAL_TIER_KINDS, default="full")
    p.add_argument(
        "--nic-gbit-s", type=float, default=200.0, help="per-node NIC bandwidth for global-tier loads"
    )
    g = p.add_argument_group("global tier path (defaults: LMCache + Mooncake as measured; docs/simulator.md)")
    g.add_argument(
        "--global-load-gbit-s",
        type=float,
        default=60.0,
        help="per-GPU load throughput LMCache+Mooncake achieve, Gb/s (default 60 = 7.5 GB/s; "
        "0 = no per-GPU limit, i.e. NIC line rate)",
    )
    g.add_argument(
        "--global-store-gbit-s",
        type=float,
        default=200.0,
        help="source-side bandwidth per store node, Gb/s, shared by all readers and writers (0 = unlimited)",
    )
    g.add_argument("--global-lookup-ms", type=float, default=2.0, help="lookup latency per admitted request")
    g.add_argument(
        "--global-load-mode",
        choices=LOAD_MODES,
        default="sync",
        help="sync: a load stalls the instance's whole batch (LMCache's vLLM connector); async: only the request",
    )
    g.add_argument(
        "--global-placement",
        choices=PLACEMENTS,
        default="spread",
        help="spread: every load over the NIC (LMCache + Mooncake defaults); node: replicas in the writer "
        "node's DRAM segment, same-node loads over PCIe (docs/simulator.md, Node-local path)",
    )
    g.add_argument(
        "--global-node-local-gbit-s",
        type=float,
        default=176.8,
        help="per-GPU host->GPU rate of a node-local load with --global-placement node, Gb/s",
    )
    g.add_argument(
        "--global-chunk-tokens",
        type=int,
        default=256,
        help="LMCache chunk_size: the tier stores a prompt's whole chunks only (save_unfull_chunk false)",
    )
    g.add_argument(
        "--save-decode-cache",
        action="store_true",
        help="LMCache save_decode_cache: also write each answer's blocks to the tier (default off, as pinned)",
    )
    g.add_argument(
        "--no-global-save-copy",
        action="store_true",
        help="do not charge the store's GPU->CPU copy (LMCache wait_for_save) to the step (ablation)",
    )
    g.add_argument(
        "--no-global-write-back",
        action="store_true",
        help="do not charge the write-back of computed KV to the links",
    )
