"""Restart without amnesia: the prefix index outlives the process.

The approximate index learns only from the picker's own routing decisions, so a restarted picker
knew nothing, and the follow-up turns of every running session lost their engine. Two ways back,
both optional:

* ``--state-file PATH``: the index is written there every ``--state-interval-ms`` (atomically: a
  temporary file renamed over it) and at shutdown, and read at start-up. A SIGKILLed picker loses at
  most one interval of learning; a SIGTERMed one (a rolling restart) loses nothing.
* ``--snapshot-port N`` serves ``GET /snapshot`` (the same bytes); ``--peers host:port,...`` makes a
  starting picker fetch the first answering peer's snapshot before it reports ready, so a new or
  restarted replica decides as the warm one does from its first request.
* Responses follow-ups (:mod:`smetric.epp.server.affinity`) between running replicas: a response
  id a picker learns (at its answer's first bytes) is POSTed to every peer's ``/responses`` within
  ``PUSH_INTERVAL_S`` (batched; at most ``MAX_OUTBOX`` waiting, the oldest dropped; each POST bounded
  by ``PUSH_TIMEOUT_S``; a peer that does not answer misses that batch). A client can send its
  follow-up before the push lands (a loaded replica, a lost batch): a follow-up whose id this
  replica does not know asks every peer's ``GET /responses/{id}`` at once (:meth:`StateKeeper.ask_peers`,
  bounded by ``PEER_ASK_TIMEOUT_S`` and the request's decision budget) before it is routed; the
  replica that saw the response knows it from that response's first bytes.

Format: JSON ``{"version": 1, "tokens_per_key": T, "saved_at": unix_s, "endpoints": {address:
base64(uint64 little-endian keys, least recent first)}, "responses": {response_id: address}}``
(``responses``: the Responses follow-up map, :mod:`smetric.epp.server.affinity`, least recent first;
absent in older snapshots and without the map). A snapshot whose ``tokens_per_key``
differs (another ``--block-size``) is ignored with a warning; so is an unreadable one.

Both indexes are snapshotted: the approximate one's learned keys, the precise one's per-endpoint
block sets as the KV events left them (a restarted picker with the precise index would otherwise
know none of the blocks stored before it subscribed). A precise snapshot can list blocks an engine
evicted while the picker was down, so one older than the index's ``snapshot_max_age_s`` is ignored.
"""

from __future__ import annotations

import asyncio
import base64
import logging
import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Protocol

import numpy as np
import orjson

if TYPE_CHECKING:
    import aiohttp
    from aiohttp import web

from smetric.core.stopping import cancel_and_wait
from smetric.epp.server.affinity import PEER_ASK_TIMEOUT_S, ResponseAffinity, valid_id

log = logging.getLogger(__name__)


class SnapshotIndex(Protocol):
    """What a snapshot reads and restores (both prefix indexes provide it)."""

    @property
    def tokens_per_key(self) -> int: ...

    def export_state(self) -> dict[str, list[int]]: ...

    def import_state(self, state: dict[str, list[int]]) -> None: ...


MAX_SNAPSHOT_BYTES = 256 * 1024 * 1024  # a peer's answer larger than this is refused
MAX_PUSH_BYTES = 4 * 1024 * 1024  # a peer's /responses POST larger than this is refused (413)
MAX_OUTBOX = 10_000  # learned response ids waiting for the next push
PUSH_INTERVAL_S = 0.05
PUSH_TIMEOUT_S = 1.0


def dump(index: SnapshotIndex, responses: ResponseAffinity | None = None) -> bytes:
    endpoints = {
        address: base64.b64encode(np.asarray(keys, dtype="<u8").tobytes()).decode()
        for address, keys in index.export_state().items()
    }
    doc = {
        "version": 1,
        "tokens_per_key": index.tokens_per_key,
        "saved_at": time.time(),
        "endpoints": endpoints,
    }
    if responses is not None:
        doc["responses"] = responses.export_state()
    return orjson.dumps(doc)


def load(index: SnapshotIndex, data: bytes, source: str, responses: ResponseAffinity | None = None) -> bool:
    """Replace ``index``'s state (and ``responses``' entries) with the snapshot; ``False`` (and a
    warning) if it does not fit."""
    try:
        doc = orjson.loads(data)
        if doc.get("version") != 1 or doc.get("tokens_per_key") != index.tokens_per_key:
            log.warning("snapshot from %s does not match this picker's index: ignored", source)
            return False
        max_age_s = getattr(index, "snapshot_max_age_s", None)
        age_s = time.time() - float(doc.get("saved_at", 0.0))
        if max_age_s is not None and age_s > max_age_s:
            log.warning("snapshot from %s is %.0f s old (limit %.0f s): ignored", source, age_s, max_age_s)
            return False
        state = {
            str(address): np.frombuffer(base64.b64decode(raw), dtype="<u8").tolist()
            for address, raw in dict(doc["endpoints"]).items()
        }
        followups = dict(doc.get("responses") or {})
    except (orjson.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as exc:
        log.warning("snapshot from %s is unreadable (%s): ignored", source, exc)
        return False
    index.import_state(state)
    if responses is not None:
        responses.import_state(followups)
    log.info(
        "prefix index restored from %s",
        source,
        extra={"endpoints": len(state), "keys": sum(map(len, state.values()))},
    )
    return True


MAX_PEER_ADDRESSES = 64  # addresses one --peers name may resolve to


async def _addresses(peer: str) -> list[str]:
    """Every ``ip:port`` a peer name resolves to (a Kubernetes headless Service: one per replica,
    this one included -- a batch sent to itself is merged as known); the name itself when it does
    not resolve (the POST then fails and is logged)."""
    host, _, port = peer.rpartition(":")
    try:
        infos = await asyncio.get_running_loop().getaddrinfo(
            host.strip("[]"), int(port), type=socket.SOCK_STREAM
        )
    except (OSError, ValueError):
        return [peer]
    ips = list(dict.fromkeys(str(info[4][0]) for info in infos))[:MAX_PEER_ADDRESSES]
    return [f"[{ip}]:{port}" if ":" in ip else f"{ip}:{port}" for ip in ips] or [peer]


class StateKeeper:
    """Periodic and final snapshots to ``path``; the peer server; the start-up restore."""

    def __init__(
        self,
        index: SnapshotIndex,
        path: str = "",
        interval_s: float = 2.0,
        peers: tuple[str, ...] = (),
        serve_port: int = 0,
        host: str = "127.0.0.1",
        responses: ResponseAffinity | None = None,
    ) -> None:
        self.index = index
        self.responses = responses
        self.path = Path(path) if path else None
        self.interval_s = interval_s
        self.peers = peers
        self.serve_port = serve_port
        self.host = host
        self._task: asyncio.Task[None] | None = None
        self._pusher: asyncio.Task[None] | None = None
        self._asker: aiohttp.ClientSession | None = None
        self._runner: web.AppRunner | None = None
        self.restored_from = ""
        self._outbox: dict[str, str] = {}
        self._pending = asyncio.Event()
        self.push_dropped = 0
        if responses is not None and peers:
            responses.listener = self.learned

    def learned(self, response_id: str, address: str) -> None:
        """A response id this picker learned: pushed to the peers with the next batch."""
        if len(self._outbox) >= MAX_OUTBOX:
            self._outbox.pop(next(iter(self._outbox)))
            self.push_dropped += 1
        self._outbox[response_id] = address
        self._pending.set()

    async def _push(self) -> None:
        import aiohttp  # only with --peers (see _restore_from_peers)

        async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PUSH_TIMEOUT_S)) as session:
            while True:
                await self._pending.wait()
                await asyncio.sleep(PUSH_INTERVAL_S)  # batch what arrives meanwhile
                self._pending.clear()
                batch, self._outbox = orjson.dumps(self._outbox), {}
                targets = [t for peer in self.peers for t in await _addresses(peer)]
                await asyncio.gather(*(self._post(session, t, batch) for t in targets))

    @staticmethod
    async def _post(session: aiohttp.ClientSession, peer: str, batch: bytes) -> None:
        import aiohttp

        try:
            async with session.post(
                f"http://{peer}/responses", data=batch, headers={"content-type": "application/json"}
            ) as resp:
                await resp.read()
        except (aiohttp.ClientError, TimeoutError) as exc:
            log.debug("peer %s missed a response-id batch (%s)", peer, exc)

    async def ask_peers(self, response_id: str) -> str | None:
        """Where ``response_id`` lives, from the first peer that knows it (remembered here, not
        pushed on); ``None`` when none answers with it within ``PEER_ASK_TIMEOUT_S``."""
        if self.responses is None or not self.peers or not valid_id(response_id):
            return None
        import aiohttp

        if self._asker is None:
            self._asker = aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=PEER_ASK_TIMEOUT_S))
        session = self._asker
        targets = [t for peer in self.peers for t in await _addresses(peer)]
        asks = [asyncio.ensure_future(self._ask(session, t, response_id)) for t in targets]
        try:
            for answer in asyncio.as_completed(asks):
                address = await answer
                if address is not None and self.responses.remember(response_id, address, notify=False):
                    return address
        finally:
            for ask in asks:
                ask.cancel()
        return None

    @staticmethod
    async def _ask(session: aiohttp.ClientSession, peer: str, response_id: str) -> str | None:
        import aiohttp

        try:
            async with session.get(f"http://{peer}/responses/{response_id}") as resp:
                if resp.status != 200:
                    return None
                doc = orjson.loads(await resp.content.read(4096))
        except (aiohttp.ClientError, TimeoutError, orjson.JSONDecodeError) as exc:
            log.debug("peer %s did not answer for a response id (%s)", peer, exc)
            return None
        address = doc.get("address") if isinstance(doc, dict) else None
        return address if isinstance(address, str) else None

    async def _answer(self, request: web.Request) -> web.Response:
        from aiohttp import web

        rid = request.match_info["rid"]
        address = self.responses.lookup(rid) if self.responses is not None and valid_id(rid) else None
        if address is None:
            return web.Response(status=404)
        return web.json_response({"address": address})

    async def _receive(self, request: web.Request) -> web.Response:
        from aiohttp import web

        if self.responses is None:
            return web.Response(status=404)
        if (request.content_length or 0) > MAX_PUSH_BYTES:
            return web.Response(status=413)
        raw = await request.content.read(MAX_PUSH_BYTES + 1)
        if len(raw) > MAX_PUSH_BYTES:
            return web.Response(status=413)
        try:
            doc = orjson.loads(raw)
        except orjson.JSONDecodeError:
            return web.Response(status=400)
        if not isinstance(doc, dict):
            return web.Response(status=400)
        taken = self.responses.import_state(doc, replace=False)
        return web.json_response({"taken": taken})

    async def restore(self, timeout_s: float = 2.0) -> str:
        """Peers first (the freshest state), then the file; returns where the state came from."""
        if self.peers:
            await self._restore_from_peers(timeout_s)
            if self.restored_from:
                return self.restored_from
        path = self.path
        if (
            path is not None
            and path.is_file()
            and load(self.index, path.read_bytes(), str(path), self.responses)
        ):
            self.restored_from = str(path)
        return self.restored_from

    async def _restore_from_peers(self, timeout_s: float) -> None:
        import aiohttp  # only with --peers: a picker without them starts without aiohttp (~0.6 s)

        for peer in self.peers:
            url = f"http://{peer}/snapshot"
            try:
                async with (
                    aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=timeout_s)) as session,
                    session.get(url) as resp,
                ):
                    if resp.status == 200:
                        data = await resp.content.read(MAX_SNAPSHOT_BYTES + 1)
                        if len(data) <= MAX_SNAPSHOT_BYTES and load(self.index, data, url, self.responses):
                            self.restored_from = url
                            return
            except (aiohttp.ClientError, TimeoutError) as exc:
                log.info("peer %s has no snapshot (%s)", peer, exc)

    def save(self) -> None:
        if self.path is None:
            return
        tmp = self.path.with_name(self.path.name + ".tmp")
        try:
            tmp.write_bytes(dump(self.index, self.responses))
            os.replace(tmp, self.path)
        except OSError as exc:
            log.warning("cannot write the state file %s: %s", self.path, exc)

    async def start(self) -> None:
        if self.path is not None:
            self._task = asyncio.get_running_loop().create_task(self._periodic(), name="state-snapshot")
        if self.responses is not None and self.peers:
            self._pusher = asyncio.get_running_loop().create_task(self._push(), name="response-id-push")
        if self.serve_port:
            from aiohttp import web

            app = web.Application(client_max_size=MAX_PUSH_BYTES)
            app.router.add_get("/snapshot", self._serve)
            app.router.add_post("/responses", self._receive)
            app.router.add_get("/responses/{rid}", self._answer)
            self._runner = web.AppRunner(app, access_log=None)
            await self._runner.setup()
            await web.TCPSite(self._runner, self.host, self.serve_port).start()

    async def _serve(self, _: web.Request) -> web.Response:
        from aiohttp import web

        return web.Response(body=dump(self.index, self.responses), content_type="application/json")

    async def _periodic(self) -> None:
        while True:
            await asyncio.sleep(self.interval_s)
            self.save()

    async def stop(self) -> None:
        await cancel_and_wait(self._task, self._pusher)
        self._task = self._pusher = None
        if self._asker is not None:
            await self._asker.close()
            self._asker = None
        self.save()
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
