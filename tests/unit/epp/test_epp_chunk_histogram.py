"""The per-chunk histogram (``smetric.epp.obs.chunk_histogram``) exposes exactly what
prometheus_client's ``Histogram`` exposes for the same observations (values on bucket bounds,
between them, past the last, negative), parsed by ``prometheus_client.parser``."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Histogram, generate_latest
from prometheus_client.parser import text_string_to_metric_families

from smetric.epp.obs.chunk_histogram import ChunkHistogram

BUCKETS = (0.001, 0.005, 0.01, 0.1, 1, 2)
VALUES = (0.0, 0.001, 0.0010001, 0.005, 0.05, 0.1, 1.0, 1.5, 2.0, 7.5, -0.5, 0.01)


def _samples(registry: CollectorRegistry) -> list[tuple[str, tuple[tuple[str, str], ...], float]]:
    text = generate_latest(registry).decode()
    return sorted(
        (s.name, tuple(sorted(s.labels.items())), s.value)
        for f in text_string_to_metric_families(text)
        for s in f.samples
        if not s.name.endswith("_created")
    )


def test_the_exposition_is_prometheus_clients() -> None:
    ours, theirs = CollectorRegistry(), CollectorRegistry()
    fast = ChunkHistogram("itl_seconds", "Gaps.", ("model",), BUCKETS, ours)
    ref = Histogram("itl_seconds", "Gaps.", ("model",), buckets=BUCKETS, registry=theirs)
    for model in ("a", "b"):
        for v in VALUES if model == "a" else VALUES[:3]:
            fast.labels(model).observe(v)
            ref.labels(model).observe(v)
    assert _samples(ours) == _samples(theirs)
    ((family,),) = [list(text_string_to_metric_families(generate_latest(ours).decode()))]
    assert family.type == "histogram" and family.documentation == "Gaps."


def test_bad_buckets_and_label_counts_are_refused() -> None:
    with pytest.raises(ValueError, match="strictly increasing"):
        ChunkHistogram("x", "x", (), (1, 1), CollectorRegistry())
    h = ChunkHistogram("y", "y", ("a", "b"), BUCKETS, CollectorRegistry())
    with pytest.raises(ValueError, match="2 label values expected"):
        h.labels("only-one")
