"""Bench results: one (router, policy) run's row, and the per-request JSON lines. The tables, JSON
document and figure over rates and seeds are in :mod:`smetric.bench.rowreport`."""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import orjson

from smetric.bench.metrics import Summary
from smetric.bench.replay import RequestRecord


@dataclass(frozen=True, slots=True)
class PolicyResult:
    """One row: a policy behind a router, its summary, or why it could not run."""

    label: str  # e.g. "smetric" or "vllm-router:kv_aware"
    router: str  # "envoy+smetric-epp" | "vllm-router"
    policy: str
    status: str  # "ok" | "failed" | "skipped"
    note: str = ""
    summary: Summary | None = None


def _fmt(value: float, spec: str) -> str:
    return "-" if value is None or (isinstance(value, float) and math.isnan(value)) else format(value, spec)


def _pct(value: float, sep: str = "") -> str:
    text = _fmt(value * 100, ".1f")
    return text if text == "-" else f"{text}{sep}%"


def _clean(value: Any) -> Any:
    if isinstance(value, float) and not math.isfinite(value):
        return None  # JSON has no NaN
    if isinstance(value, Mapping):
        return {k: _clean(v) for k, v in value.items()}
    if isinstance(value, list | tuple):
        return [_clean(v) for v in value]
    return value


def record_line(label: str, record: RequestRecord, **extra: Any) -> bytes:
    """One request as a JSON line (the response text left out); ``extra`` keys (rate, seed) added."""
    doc = dataclasses.asdict(record)
    doc["outcome"].pop("text", None)
    doc["label"] = label
    doc.update(extra)
    return orjson.dumps(_clean(doc)) + b"\n"
