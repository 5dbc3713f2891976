"""CPU the llm-d-router ``llm_d_epp_*`` series add to the picker's data path.

    python -m smetric.bench.latency.metrics_cost [--requests 2000] [--chunks 20000] [--reps 11]

Drives one :class:`~smetric.epp.server.servicer.ExtProcServicer` in process (three static
endpoints, the approximate index) through ``handle`` as the gRPC loop would, with the series on
and with :class:`~smetric.epp.obs.llmd_metrics.LlmdMetrics`' request-path methods replaced by
no-ops, alternating, and prints the minimum over ``--reps`` of each:

* per routed request: headers, a chat body, the decision, SSE response headers, one last chunk
  with the usage, the stream's end (process CPU time);
* per response chunk of a stream (wall time of the response path alone).

Every other process on the machine shares its cores: compare the two numbers of one run.
"""

from __future__ import annotations

import argparse
import time
from collections.abc import Callable

import orjson
from envoy.config.core.v3 import base_pb2
from envoy.extensions.filters.http.ext_proc.v3 import processing_mode_pb2 as pm
from envoy.service.ext_proc.v3 import external_processor_pb2 as ep
from prometheus_client import CollectorRegistry

from smetric.epp.index.approximate import ApproximateIndex
from smetric.epp.obs.labels import ModelLabels
from smetric.epp.obs.metrics import PickerMetrics
from smetric.epp.server.decide import Picker
from smetric.epp.server.servicer import ExtProcServicer
from smetric.epp.server.static import StaticEndpointSource
from smetric.epp.server.stream import StreamState
from smetric.policy.base import PolicyParams
from smetric.policy.framework import Router
from smetric.policy.registry import make_policy

LLMD_METHODS = ("routed", "response_headers", "response_chunk", "handler_time", "finished")
DUPLEX = pm.ProcessingMode.FULL_DUPLEX_STREAMED


def _headers(pairs: dict[str, str], **kw: bool) -> ep.HttpHeaders:
    hm = base_pb2.HeaderMap(
        headers=[base_pb2.HeaderValue(key=k, raw_value=v.encode()) for k, v in pairs.items()]
    )
    return ep.HttpHeaders(headers=hm, **kw)


def _servicer(llmd: bool) -> ExtProcServicer:
    source = StaticEndpointSource(["10.0.0.1:8000", "10.0.0.2:8000", "10.0.0.3:8000"])
    params = PolicyParams()
    picker = Picker(source, ApproximateIndex(), Router(make_policy("lmetric", params)), params.cost_model)
    metrics = PickerMetrics(CollectorRegistry(), models=ModelLabels(["m"]))
    if not llmd:
        for name in LLMD_METHODS:
            setattr(metrics.llmd, name, lambda *a, **k: None)
    return ExtProcServicer(picker, metrics)


REQUEST = ep.ProcessingRequest(
    request_headers=_headers({":method": "POST", ":path": "/v1/chat/completions"}),
    protocol_config=ep.ProtocolConfiguration(request_body_mode=DUPLEX, response_body_mode=DUPLEX),
)
BODY = ep.ProcessingRequest(
    request_body=ep.HttpBody(
        body=orjson.dumps(
            {"model": "m", "stream": True, "messages": [{"role": "user", "content": "hi " * 400}]}
        ),
        end_of_stream=True,
    )
)
RESPONSE = ep.ProcessingRequest(
    response_headers=_headers({":status": "200", "content-type": "text/event-stream"})
)
USAGE = {"choices": [], "usage": {"prompt_tokens": 400, "completion_tokens": 5}}
LAST = ep.ProcessingRequest(
    response_body=ep.HttpBody(
        body=b"data: " + orjson.dumps(USAGE) + b"\n\ndata: [DONE]\n\n", end_of_stream=True
    )
)
CHUNK = ep.ProcessingRequest(
    response_body=ep.HttpBody(body=b'data: {"choices":[{"index":0,"delta":{"content":"hi"}}]}\n\n')
)


def per_request_us(llmd: bool, n: int) -> float:
    servicer = _servicer(llmd)
    t0 = time.process_time()
    for _ in range(n):
        st = StreamState()
        for m in (REQUEST, BODY, RESPONSE, LAST):
            servicer.handle(st, m)
        servicer._finish(st)  # the stream's end, as Process' finally-block
    return (time.process_time() - t0) / n * 1e6


def per_chunk_us(llmd: bool, n: int) -> float:
    servicer = _servicer(llmd)
    st = StreamState()
    for m in (REQUEST, BODY, RESPONSE):
        servicer.handle(st, m)
    t0 = time.perf_counter()
    for _ in range(n):
        servicer.handle(st, CHUNK)
    return (time.perf_counter() - t0) / n * 1e6


def _min_pair(run: Callable[[bool, int], float], n: int, reps: int) -> tuple[float, float]:
    on, off = [], []
    for _ in range(reps):
        on.append(run(True, n))
        off.append(run(False, n))
    return min(on), min(off)


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    ap.add_argument("--requests", type=int, default=2000)
    ap.add_argument("--chunks", type=int, default=20000)
    ap.add_argument("--reps", type=int, default=11)
    args = ap.parse_args()
    on, off = _min_pair(per_request_us, args.requests, args.reps)
    print(f"per routed request (CPU): {on:.1f} us with llm_d_epp_*, {off:.1f} us without, +{on - off:.1f} us")
    on, off = _min_pair(per_chunk_us, args.chunks, args.reps)
    print(
        f"per response chunk (wall): {on:.2f} us with llm_d_epp_*, {off:.2f} us without, +{on - off:.2f} us"
    )


if __name__ == "__main__":
    main()
