"""Clients cannot choose the picker's metric label values (smetric.epp.obs.labels).

Through the real servicer (its ``Process`` generator, no gRPC transport: 10,000 requests in a few
seconds): 10,000 random model names and a few 64 KiB ones leave ``/metrics`` with the same series
and the same size (within the digits of counters that grew); the served models come from the
config or from the engines' ``/v1/models`` (the emulator's, in process)."""

from __future__ import annotations

import asyncio
import random
import string
from collections.abc import AsyncIterator, Iterable

import orjson
from envoy.config.core.v3 import base_pb2
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from google.protobuf import struct_pb2
from prometheus_client import generate_latest
from prometheus_client.parser import text_string_to_metric_families

from smetric.emulator.cluster import start_cluster
from smetric.emulator.config import EmulatorConfig
from smetric.emulator.ports import free_port_block
from smetric.epp.obs.labels import MAX_LABEL_CHARS, OTHER, ModelLabels, status_label
from smetric.epp.obs.metrics import PickerMetrics
from smetric.epp.scrape.models import MAX_MODELS_PER_ENDPOINT, parse_model_ids
from smetric.epp.scrape.scraper import ScrapeManager
from smetric.epp.server.servicer import ExtProcServicer
from tests.support.epp_harness import BASE_HEADERS, body_msgs, build, chat, headers_msg, set_headers

SERVED = "qwen"


async def _messages(msgs: Iterable[ep.ProcessingRequest]) -> AsyncIterator[ep.ProcessingRequest]:
    for m in msgs:
        yield m


def _response(status: int) -> list[ep.ProcessingRequest]:
    hm = [(":status", str(status)), ("content-type", "application/json")]
    headers = base_pb2.HeaderMap(headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in hm])
    return [
        ep.ProcessingRequest(response_headers=ep.HttpHeaders(headers=headers)),
        ep.ProcessingRequest(response_body=ep.HttpBody(body=b"{}", end_of_stream=True)),
    ]


async def _request(servicer: ExtProcServicer, model: str, status: int) -> list[ep.ProcessingResponse]:
    """One request through the servicer's stream handler: routed, then answered with ``status``."""
    msgs = [headers_msg(BASE_HEADERS), *body_msgs(chat(model=model)), *_response(status)]
    return [r async for r in servicer.Process(_messages(msgs), None)]


def _series(metrics: PickerMetrics) -> tuple[set[tuple[str, tuple[tuple[str, str], ...]]], int]:
    page = generate_latest(metrics.registry)
    names = {
        (s.name, tuple(sorted(s.labels.items())))
        for fam in text_string_to_metric_families(page.decode())
        for s in fam.samples
    }
    return names, len(page)


def _random_name(rng: random.Random) -> str:
    return "".join(rng.choices(string.ascii_letters + string.digits + "/-._", k=rng.randint(1, 64)))


async def test_ten_thousand_made_up_models_leave_the_metrics_page_as_it_was() -> None:
    # one endpoint: its series exist from the first requests on
    servicer, _, _, metrics = build(["10.0.0.1:8000"], models=(SERVED,))
    for model in (SERVED, "not-served"):  # every series the page will have: served, other, 404s
        for status in (200, 404):
            routed = await _request(servicer, model, status)
            assert set_headers(routed[0])  # routed (the engine answers for an unknown model)
    before, size_before = _series(metrics)

    rng = random.Random(33)
    names = [_random_name(rng) for _ in range(10_000)] + ["x" * 65536 + str(i) for i in range(20)]
    for i, name in enumerate(names):
        await _request(servicer, name, 404 if i % 2 else 200)

    after, size_after = _series(metrics)
    assert len(after - before) == 0, f"{len(after - before)} new series, {size_before} -> {size_after} bytes"
    # the same lines; only counters and sums have more digits (10,020 requests: ~5 more each)
    assert size_after - size_before < 0.05 * size_before, (size_before, size_after)
    other = (("model_name", OTHER), ("target_model_name", OTHER))
    assert metrics.registry.get_sample_value("inference_model_request_total", dict(other)) == 10_022
    assert (
        metrics.registry.get_sample_value(
            "inference_model_request_total", {"model_name": SERVED, "target_model_name": SERVED}
        )
        == 2
    )


def test_model_labels_bound_count_and_length() -> None:
    labels = ModelLabels([f"m{i}" for i in range(10)] + ["y" * 1000], max_labels=5)
    assert [labels(f"m{i}") for i in range(5)] == [f"m{i}" for i in range(5)]
    assert labels("m7") == OTHER  # past the cap: other, even when served
    assert labels("m3") == "m3"  # emitted before: stays
    assert labels("") == ""  # no body: one value
    long = ModelLabels(["y" * 1000])
    assert long("y" * 1000) == "y" * MAX_LABEL_CHARS
    assert ModelLabels()("anything") == OTHER  # nothing served known: other
    assert [status_label(s) for s in (200, 503, 99, 600, -1, 10**9)] == ["200", "503", *[OTHER] * 4]


def test_configured_models_win_over_discovery() -> None:
    asked: list[str] = []

    def discovered(model: str) -> bool:
        asked.append(model)
        return model == "lora-a"

    labels = ModelLabels(["base"], discovered)
    assert (labels("base"), labels("lora-a")) == ("base", OTHER)
    assert not asked
    labels.configure(())
    assert labels("lora-a") == "lora-a" and asked == ["lora-a"]


def test_model_list_parsing_is_bounded() -> None:
    page = orjson.dumps(
        {"data": [{"id": f"m{i}"} for i in range(1000)] + [{"id": "z" * 5000}, {"id": 7}, "junk"]}
    )
    ids = parse_model_ids(page)
    assert len(ids) == MAX_MODELS_PER_ENDPOINT and ids[0] == "m0"
    for bad in (b"not json", b"[]", b'{"data": 3}'):
        try:
            parse_model_ids(bad)
        except ValueError:
            continue
        raise AssertionError(f"{bad!r} parsed")


async def test_served_models_are_discovered_from_the_emulators_v1_models() -> None:
    cluster = await start_cluster(
        EmulatorConfig(port=free_port_block(2), instances=1, model="emu-model", time_scale=0.01)
    )
    host, port = cluster.runners[0].addresses[0][:2]
    address = f"{host}:{port}"
    scraper = ScrapeManager(interval_s=0.05, timeout_s=2.0)
    try:
        scraper.sync([address])
        for _ in range(200):
            if scraper.models(address):
                break
            await asyncio.sleep(0.02)
        assert scraper.models(address) == ("emu-model",)
        labels = ModelLabels((), lambda m: m in scraper.models(address))
        assert (labels("emu-model"), labels("made-up")) == ("emu-model", OTHER)
    finally:
        await scraper.stop()
        await cluster.stop()


async def test_an_endpoint_label_is_always_one_the_picker_named() -> None:
    """Envoy's report of the endpoint it used counts only when it is one of the picker's."""
    servicer, _, _, metrics = build(["10.0.0.1:8000"], models=(SERVED,))
    response = _response(503)
    md = struct_pb2.Struct()
    md.update({"x-gateway-destination-endpoint-served": "evil-" + "x" * 1000})
    response[0].metadata_context.filter_metadata["envoy.lb"].CopyFrom(md)
    msgs = [headers_msg(BASE_HEADERS), *body_msgs(chat(model=SERVED)), *response]
    [r async for r in servicer.Process(_messages(msgs), None)]
    get = metrics.registry.get_sample_value
    assert get("smetric_epp_endpoint_errors_total", {"endpoint": "10.0.0.1:8000", "code": "503"}) == 1
    metrics.forget_endpoint("10.0.0.1:8000")  # discovery dropped it: its series go
    assert get("smetric_epp_endpoint_errors_total", {"endpoint": "10.0.0.1:8000", "code": "503"}) is None
