"""Worker processes that parse and key large request bodies (``--parse-processes``).

Each worker is ``python -m smetric.epp.server.parseworker RECIPE_JSON``: a fresh interpreter that
imports the parser and the index's key code only (not the picker's gRPC stack, ~25 MB before its
tokenizer), builds the keyer from its :class:`~smetric.epp.server.keyrecipe.KeyRecipe`, says
``ready`` and then answers one body at a time over its stdin and stdout:

* request: ``>II`` (path length, body length), the path, the body;
* answer: ``>I`` length, then a pickle of ``("ok", ParsedBody, PromptKey)`` (the slim parse and key,
  :func:`~smetric.epp.server.keyrecipe.slim`) or ``("err", status, message)``.

Both ends are this package (pickle is not a trust boundary here). A worker exits when its stdin
closes (the picker stopped or died). :class:`WorkerPool` is the picker's side: at most ``n``
workers, started on first use, one body each at a time; a worker whose exchange did not finish
(it died, or the request was cancelled mid-exchange) is killed and replaced by a fresh one.

Workers are started with CPython's :mod:`subprocess` (``vfork`` + ``exec`` on Linux: no Python
code runs in the child before ``exec``), never with the event loop's ``subprocess_exec``: uvloop's
(the picker's default loop) forks through libuv and runs the interpreter's at-fork hooks in the
child of this multi-threaded process (gRPC's threads), and under load that child crashed with
SIGSEGV before it could ``exec`` (the chaos row "8 concurrent 15.5 MiB agent bodies" lost bodies
to "parse worker ... exited (-11)"). Their pipes are then handed to the running loop. The start
holds the loop for the ``vfork`` + ``exec`` only (0.3 ms median, 4 ms at most in 20 starts here),
not for the interpreter's start-up, which the pipe's ``ready`` answer is awaited for.
"""

from __future__ import annotations

import asyncio
import contextlib
import ctypes
import dataclasses
import json
import pickle
import struct
import subprocess
import sys
import time
from typing import BinaryIO

from smetric.epp.contracts import PromptKey
from smetric.epp.parse.body import ParsedBody, parse_body
from smetric.epp.parse.errors import RequestError
from smetric.epp.server.keyrecipe import Keyer, KeyRecipe, slim

_REQUEST = struct.Struct(">II")
_ANSWER = struct.Struct(">I")
READY = b"ready"
START_TIMEOUT_S = 120.0  # interpreter start + tokenizer load (a Hugging Face tokenizer from disk)


# -- the worker process ----------------------------------------------------------------------------


def _read_exactly(f: BinaryIO, n: int) -> bytes | None:
    chunks, left = [], n
    while left:
        b = f.read(left)
        if not b:
            return None
        chunks.append(b)
        left -= len(b)
    return b"".join(chunks) if len(chunks) != 1 else chunks[0]


def _trim_heap() -> None:
    """Hand the last parse's freed heap back to the system (glibc keeps it otherwise, and the
    worker's RSS would stay at its largest body's peak)."""
    with contextlib.suppress(OSError, AttributeError):
        ctypes.CDLL("libc.so.6").malloc_trim(0)


def _answer(body: bytes, path: str, keyer: Keyer) -> tuple[object, ...]:
    try:
        parsed = parse_body(body, path)
        _text, key = keyer(parsed)
        return ("ok", *slim(parsed, key))
    except RequestError as exc:
        return ("err", exc.status, exc.message)
    except Exception as exc:  # a parser bug must not take the worker down: the request gets a 500
        return ("err", 500, f"the endpoint picker could not parse the body: {type(exc).__name__}: {exc}")


def serve(recipe: KeyRecipe, inp: BinaryIO, out: BinaryIO) -> None:
    keyer = recipe.build()
    out.write(_ANSWER.pack(len(READY)) + READY)
    out.flush()
    while (head := _read_exactly(inp, _REQUEST.size)) is not None:
        path_len, body_len = _REQUEST.unpack(head)
        path = _read_exactly(inp, path_len) if path_len else b""
        body = _read_exactly(inp, body_len) if body_len else b""
        if path is None or body is None:
            return
        payload = pickle.dumps(_answer(body, path.decode(), keyer), protocol=pickle.HIGHEST_PROTOCOL)
        del body
        out.write(_ANSWER.pack(len(payload)) + payload)
        out.flush()
        _trim_heap()


def main(argv: list[str] | None = None) -> None:
    args = sys.argv[1:] if argv is None else argv
    recipe = KeyRecipe(**json.loads(args[0]))
    serve(recipe, sys.stdin.buffer, sys.stdout.buffer)


# -- the picker's side -----------------------------------------------------------------------------


class WorkerDied(Exception):
    """A worker closed its output mid-exchange (killed, out of memory) or never became ready."""


class _Worker:
    """One worker process and the loop's streams over its pipes."""

    def __init__(
        self, proc: subprocess.Popen[bytes], reader: asyncio.StreamReader, writer: asyncio.StreamWriter
    ) -> None:
        self.proc = proc
        self._reader = reader
        self._writer = writer

    @classmethod
    async def spawn(cls, argv: list[str]) -> _Worker:
        """Start ``argv`` with CPython's subprocess (see the module's docstring) and hand its
        pipes to the running loop, which owns and closes them from then on."""
        proc = subprocess.Popen(argv, stdin=subprocess.PIPE, stdout=subprocess.PIPE, close_fds=True)
        assert proc.stdin is not None and proc.stdout is not None
        loop = asyncio.get_running_loop()
        try:
            reader = asyncio.StreamReader(loop=loop)
            await loop.connect_read_pipe(lambda: asyncio.StreamReaderProtocol(reader, loop=loop), proc.stdout)
            transport, protocol = await loop.connect_write_pipe(
                lambda: asyncio.streams.FlowControlMixin(loop=loop), proc.stdin
            )
        except BaseException:
            proc.kill()
            raise
        return cls(proc, reader, asyncio.StreamWriter(transport, protocol, None, loop))

    async def returncode(self, wait_s: float = 0.5) -> int | None:
        """The exit status, waiting at most ``wait_s`` for it without blocking the loop (the pipe
        closes a moment before the process is gone)."""
        await self.reap(time.monotonic() + wait_s)
        return self.proc.returncode

    async def _frame(self) -> bytes:
        try:
            (n,) = _ANSWER.unpack(await self._reader.readexactly(_ANSWER.size))
            return await self._reader.readexactly(n)
        except asyncio.IncompleteReadError:
            raise WorkerDied(f"parse worker {self.proc.pid} exited ({await self.returncode()})") from None

    async def ready(self) -> None:
        if await self._frame() != READY:
            raise WorkerDied(f"parse worker {self.proc.pid} did not say ready")

    async def call(self, body: bytes | bytearray, path: str) -> tuple[ParsedBody, PromptKey]:
        p = path.encode()
        try:
            self._writer.write(_REQUEST.pack(len(p), len(body)) + p)
            self._writer.write(body)
            await self._writer.drain()
        except (ConnectionError, BrokenPipeError):
            raise WorkerDied(f"parse worker {self.proc.pid} is gone") from None
        answer = pickle.loads(await self._frame())
        if answer[0] == "ok":
            return answer[1], answer[2]
        raise RequestError(answer[1], answer[2])

    def kill(self) -> None:
        """SIGKILL and close the pipes. The process is reaped by :meth:`reap`, or by CPython's
        subprocess at its next start (it keeps unreaped children and polls them)."""
        with contextlib.suppress(ProcessLookupError):
            self.proc.kill()
        self._writer.close()
        self._reader.feed_eof()
        self.proc.poll()

    async def reap(self, deadline: float) -> None:
        """Wait for the killed process until ``deadline`` (``time.monotonic()``), polling."""
        while self.proc.poll() is None and time.monotonic() < deadline:
            await asyncio.sleep(0.01)


class WorkerPool:
    def __init__(self, recipe: KeyRecipe, n: int, start_timeout_s: float = START_TIMEOUT_S) -> None:
        self._argv = [sys.executable, "-m", __name__, json.dumps(dataclasses.asdict(recipe))]
        self._n = max(1, n)
        self._start_timeout_s = start_timeout_s
        self._idle: list[_Worker] = []
        self._all: set[_Worker] = set()  # idle and busy, to kill at close
        self._count = 0  # workers started or starting, idle or busy
        self._freed: asyncio.Condition | None = None
        self._reaping: set[asyncio.Task[None]] = set()  # killed workers not yet reaped

    @property
    def pids(self) -> list[int]:
        return [w.proc.pid for w in self._all]

    async def _start(self) -> _Worker:
        w = await _Worker.spawn(self._argv)
        try:
            async with asyncio.timeout(self._start_timeout_s):
                await w.ready()
        except BaseException:
            self._kill(w)
            raise
        self._all.add(w)
        return w

    async def _take(self) -> _Worker:
        if self._freed is None:
            self._freed = asyncio.Condition()
        async with self._freed:
            while not self._idle and self._count >= self._n:
                await self._freed.wait()
            if self._idle:
                return self._idle.pop()
            self._count += 1
        try:
            return await self._start()
        except BaseException:
            await self._lost()
            raise

    async def _lost(self) -> None:
        assert self._freed is not None
        async with self._freed:
            self._count -= 1
            self._freed.notify()

    async def parse(self, body: bytes | bytearray, path: str) -> tuple[ParsedBody, PromptKey]:
        """Raises :class:`RequestError` (the parse's own, or 503 when a worker died)."""
        try:
            w = await self._take()
        except (WorkerDied, TimeoutError, OSError) as exc:
            raise RequestError(503, f"the endpoint picker's parse worker did not start: {exc}") from None
        try:
            result = await w.call(body, path)
        except RequestError:
            await self._give_back(w)  # the worker answered: it stays
            raise
        except BaseException as exc:  # died, or cancelled mid-exchange: its pipe state is unknown
            self._all.discard(w)
            self._kill(w)
            await asyncio.shield(self._lost())
            if isinstance(exc, WorkerDied):
                raise RequestError(503, f"the endpoint picker's {exc} (out of memory?): retry") from None
            raise
        await self._give_back(w)
        return result

    def _kill(self, w: _Worker) -> None:
        """Kill ``w`` and reap it in the background (within 5 s), so no zombie outlives it."""
        w.kill()
        if w.proc.returncode is None:
            task = asyncio.get_running_loop().create_task(w.reap(time.monotonic() + 5.0))
            self._reaping.add(task)
            task.add_done_callback(self._reaping.discard)

    async def _give_back(self, w: _Worker) -> None:
        assert self._freed is not None
        async with self._freed:
            self._idle.append(w)
            self._freed.notify()

    async def close(self, timeout_s: float = 5.0) -> None:
        """Kill every worker and reap it (within ``timeout_s``)."""
        workers = list(self._all)
        self._all.clear()
        self._idle.clear()
        for w in workers:
            w.kill()
        deadline = time.monotonic() + timeout_s
        await asyncio.gather(*(w.reap(deadline) for w in workers), *self._reaping)


if __name__ == "__main__":
    main()
