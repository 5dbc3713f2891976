"""The picker's command-line flags: the single definition the picker parses and the operator renders.

The operator imports :data:`FLAGS` to build the picker container's ``args`` (agreeing in code,
not by convention); the picker builds its ``argparse`` parser from the same table.
"""

from __future__ import annotations

import argparse
from dataclasses import dataclass


@dataclass(frozen=True, slots=True)
class Flag:
    name: str  # without leading dashes
    type: type
    default: object
    help: str


FLAGS: tuple[Flag, ...] = (
    Flag("grpc-port", int, 9002, "ext_proc gRPC port (h2c)"),
    Flag("grpc-health-port", int, 9003, "grpc.health.v1 port"),
    Flag("metrics-port", int, 9090, "Prometheus metrics port"),
    Flag("config", str, "", "policy config YAML file (EndpointPickerConfig-like); empty = smetric defaults"),
    Flag("endpoints", str, "", "standalone mode: comma-separated ip:port list, or @FILE with one per line"),
    Flag("pool-name", str, "", "Kubernetes mode: InferencePool name to watch"),
    Flag("pool-namespace", str, "default", "Kubernetes mode: InferencePool namespace"),
    Flag("prefix-index", str, "approximate", "prefix index: precise (tokenizer + KV events) | approximate"),
    Flag("tokenizer", str, "", "precise index: path or name of the model's tokenizer"),
    Flag("kv-events-port", int, 5557, "ZMQ port each model server publishes KV events on"),
    Flag("refresh-interval-ms", int, 50, "metrics scrape interval per endpoint"),
    Flag("staleness-threshold-ms", int, 2000, "metrics older than this mark an endpoint stale (saturated)"),
    Flag("max-body-bytes", int, 16 * 1024 * 1024, "requests larger than this get 413"),
    Flag("hash-seed", str, "0", "PYTHONHASHSEED shared with the engines (precise block hashes)"),
    Flag(
        "hash-algo",
        str,
        "sha256",
        "engines' --prefix-caching-hash-algo: sha256 | sha256_cbor (precise index)",
    ),
    Flag("block-size", int, 16, "engine KV block size in tokens (precise index)"),
    Flag(
        "response-path",
        str,
        "inline",
        "inline: the response passes through this stream (GIE gateways) | observer: a second ext_proc "
        "filter in observability_mode reports it and Envoy never waits for the picker on responses",
    ),
    Flag("log-level", str, "info", "debug | info | warning | error"),
)


def build_parser(prog: str = "smetric-epp") -> argparse.ArgumentParser:
    parser = argparse.ArgumentParser(prog=prog, description="SMetric endpoint picker (Envoy ext_proc)")
    for flag in FLAGS:
        parser.add_argument(f"--{flag.name}", type=flag.type, default=flag.default, help=flag.help)
    return parser


def render_args(values: dict[str, object]) -> list[str]:
    """``{"pool-name": "p"} -> ["--pool-name=p"]``; unknown names raise ``KeyError``."""
    known = {f.name for f in FLAGS}
    out: list[str] = []
    for name, value in values.items():
        if name not in known:
            raise KeyError(f"unknown picker flag {name!r}")
        out.append(f"--{name}={value}")
    return out
