"""Process supervision for the bench: start children in their own process groups, wait for health,
stop every group on exit (also on Ctrl-C and on failure), pick free ports.

Each child gets its own session (``start_new_session=True``) so stopping it signals the whole group
(Envoy's hot-restart wrapper, uvicorn workers, ...). Output goes to one log file per child; an error
about a child that died quotes the end of its log.

How a bench tool stops on SIGTERM and SIGINT (its children with it, exit status 143 / 130): an
asyncio tool runs its main coroutine with :func:`smetric.core.stopping.run_until_signalled` (the
signal cancels it; :class:`Supervisor` and ``AsyncExitStack`` exits stop the children), a
synchronous one runs inside :func:`smetric.core.stopping.sigterm_raises_interrupt` (SIGTERM raises
``KeyboardInterrupt`` as Ctrl-C does; :func:`run_child`, :func:`stop_child` and :func:`process_pool`
stop the children); both report with :func:`stopped`.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
import signal
import subprocess
import sys
import threading
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from concurrent.futures import InvalidStateError, ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path
from types import TracebackType

import aiohttp

from smetric.core import outputs, ports
from smetric.core.stopping import Interrupted, interrupt_exit_code


class BenchError(RuntimeError):
    """A failure the bench reports to the user as one clear line (no traceback)."""


@dataclass(slots=True)
class Child:
    name: str
    argv: tuple[str, ...]
    proc: asyncio.subprocess.Process
    log_path: Path

    @property
    def pid(self) -> int:
        return self.proc.pid

    def alive(self) -> bool:
        return self.proc.returncode is None

    def log_tail(self, n_chars: int = 1500) -> str:
        try:
            text = self.log_path.read_text(encoding="utf-8", errors="replace")
        except OSError:
            return ""
        return text[-n_chars:]


class Supervisor:
    """Owns every process the bench starts; ``async with`` guarantees they are all stopped."""

    def __init__(self, log_dir: Path, stop_timeout_s: float = 5.0) -> None:
        self.log_dir = log_dir
        self.stop_timeout_s = stop_timeout_s
        self._children: dict[str, Child] = {}

    async def __aenter__(self) -> Supervisor:
        self.log_dir.mkdir(parents=True, exist_ok=True)
        return self

    async def __aexit__(
        self, exc_type: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None
    ) -> None:
        # Shield: a cancelled run (Ctrl-C) must still reap every child.
        await asyncio.shield(self.stop_all())

    @property
    def children(self) -> Mapping[str, Child]:
        return dict(self._children)

    async def start(self, name: str, argv: Sequence[str], env: Mapping[str, str] | None = None) -> Child:
        if name in self._children and self._children[name].alive():
            raise BenchError(f"{name} is already running (pid {self._children[name].pid})")
        log_path = self.log_dir / f"{name}.log"
        full_env = dict(os.environ)
        if env:
            full_env.update(env)
        with log_path.open("ab") as log:
            try:
                proc = await asyncio.create_subprocess_exec(
                    *argv,
                    stdin=asyncio.subprocess.DEVNULL,
                    stdout=log,
                    stderr=asyncio.subprocess.STDOUT,
                    env=full_env,
                    start_new_session=True,
                )
            except FileNotFoundError as exc:
                raise BenchError(f"cannot start {name}: {argv[0]!r} not found") from exc
            except PermissionError as exc:
                raise BenchError(f"cannot start {name}: {argv[0]!r} is not executable") from exc
        child = Child(name, tuple(argv), proc, log_path)
        self._children[name] = child
        return child

    def check_alive(self) -> None:
        """Raise :class:`BenchError` naming the first child that exited unexpectedly."""
        for child in self._children.values():
            if not child.alive():
                raise BenchError(
                    f"{child.name} exited with code {child.proc.returncode}; "
                    f"end of {child.log_path}:\n{child.log_tail()}"
                )

    async def stop(self, name: str) -> None:
        child = self._children.pop(name, None)
        if child is not None:
            await _stop_group(child, self.stop_timeout_s)

    async def stop_all(self) -> None:
        names = list(self._children)[::-1]  # reverse start order: routers before backends
        for name in names:
            await self.stop(name)


async def _stop_group(child: Child, timeout_s: float) -> None:
    if not child.alive():
        await child.proc.wait()
        return
    for sig in (signal.SIGTERM, signal.SIGKILL):
        with contextlib.suppress(ProcessLookupError):
            os.killpg(child.pid, sig)  # the child is its group's leader (start_new_session)
        try:
            await asyncio.wait_for(child.proc.wait(), timeout_s)
            break
        except TimeoutError:
            continue
    # Whatever the leader left behind in its group goes too.
    with contextlib.suppress(ProcessLookupError):
        os.killpg(child.pid, signal.SIGKILL)


def stop_child(proc: subprocess.Popen[bytes], grace_s: float) -> None:
    """Stop a child started with ``subprocess.Popen`` (outside a :class:`Supervisor`): SIGTERM, so
    it can stop what it started, SIGKILL only after ``grace_s``; reaped either way."""
    if proc.poll() is not None:
        return
    proc.terminate()
    try:
        proc.wait(timeout=grace_s)
    except subprocess.TimeoutExpired:
        proc.kill()
        proc.wait()


def run_child(cmd: Sequence[str], timeout_s: float, grace_s: float, output: Path | None = None) -> int | None:
    """Run ``cmd`` to its end; its exit status, or ``None`` when it ran past ``timeout_s``. Its
    stdout and stderr go to ``output`` (a file, replaced) when given, else to this process's. The
    child is stopped with :func:`stop_child` (SIGTERM, so it stops what it started; SIGKILL after
    ``grace_s``) when it runs too long and when this process is interrupted (Ctrl-C, or SIGTERM
    within :func:`~smetric.core.stopping.sigterm_raises_interrupt`); ``subprocess.run`` would
    SIGKILL it, leaving its own children running."""
    with contextlib.ExitStack() as files:
        out = files.enter_context(output.open("wb")) if output is not None else None
        proc = subprocess.Popen(list(cmd), stdin=subprocess.DEVNULL, stdout=out, stderr=out)
        try:
            return proc.wait(timeout=timeout_s)
        except subprocess.TimeoutExpired:
            stop_child(proc, grace_s)
            return None
        except BaseException:
            stop_child(proc, grace_s)
            raise


def _default_sigterm() -> None:
    """A pool worker's initializer: SIGTERM ends it (a fork inherits the parent's handler, which
    :func:`~smetric.core.stopping.sigterm_raises_interrupt` makes raise, and a worker reports a
    task's exception and takes the next task)."""
    signal.signal(signal.SIGTERM, signal.SIG_DFL)


def _quiet_broken_pool(
    hook: Callable[[threading.ExceptHookArgs], object], manager: threading.Thread | None
) -> Callable[[threading.ExceptHookArgs], object]:
    """``threading.excepthook`` while a pool is torn down: CPython 3.11's executor manager thread,
    finding its workers stopped, sets an exception on futures :meth:`shutdown` already cancelled
    and dies with ``InvalidStateError`` (``concurrent/futures/process.py`` ``terminate_broken``
    of CPython 3.11; later releases catch it there); that traceback is noise after a Ctrl-C. Anything else goes to ``hook``."""

    def quiet(args: threading.ExceptHookArgs) -> object:
        if args.thread is manager and args.exc_type is InvalidStateError:
            return None
        return hook(args)

    return quiet


@contextlib.contextmanager
def process_pool(workers: int, grace_s: float = 5.0) -> Iterator[ProcessPoolExecutor]:
    """A process pool for a tool's runs. Left normally: shut down once its tasks are done. Left by
    an exception (Ctrl-C, SIGTERM within ``sigterm_raises_interrupt``): its queued tasks are
    cancelled and its workers stopped at once (SIGTERM, SIGKILL after ``grace_s``), not waited for
    until their current task ends, as ``with ProcessPoolExecutor()`` would; a tool killed by
    SIGTERM without this leaves them running, blocked on their task queue for good."""
    pool = ProcessPoolExecutor(max_workers=workers, initializer=_default_sigterm)
    try:
        yield pool
    except BaseException:
        procs = list(pool._processes.values())
        # typeshed types this attribute as the wakeup object; it is the manager thread
        manager: threading.Thread | None = getattr(pool, "_executor_manager_thread", None)
        hook = threading.excepthook
        threading.excepthook = _quiet_broken_pool(hook, manager)
        try:
            pool.shutdown(wait=False, cancel_futures=True)
            for proc in procs:
                proc.terminate()
            deadline = time.monotonic() + grace_s
            for proc in procs:
                proc.join(max(0.0, deadline - time.monotonic()))
                if proc.is_alive():
                    proc.kill()
                    proc.join()
            if manager is not None:
                manager.join(max(0.0, deadline - time.monotonic()))
        finally:
            threading.excepthook = hook
        raise
    pool.shutdown(wait=True)


def stopped(prog: str, exc: Interrupted | KeyboardInterrupt) -> int:
    """A tool stopped by SIGTERM or SIGINT after its cleanup: one line on stderr; the exit status a
    shell reports for that signal (143, 130)."""
    code = exc.exit_code if isinstance(exc, Interrupted) else interrupt_exit_code(exc)
    name = signal.Signals(code - 128).name
    print(f"{prog}: stopped by {name}; every process it started was stopped", file=sys.stderr, flush=True)
    return code


def check_writable(flag: str, path: Path) -> None:
    """:class:`BenchError` naming ``flag`` when ``path`` cannot be written
    (:func:`smetric.core.outputs.check_writable`)."""
    try:
        outputs.check_writable(flag, path)
    except ValueError as exc:
        raise BenchError(str(exc)) from None


def port_is_free(port: int, host: str = "127.0.0.1") -> bool:
    return ports.bindable(port, host)


def free_port(host: str = "127.0.0.1") -> int:
    """A port free right now, below the kernel's ephemeral range (:func:`smetric.core.ports.free_port`)."""
    return ports.free_port(host)


def free_port_range(count: int, host: str = "127.0.0.1", start: int = 20000, stop: int = 60000) -> int:
    """First port ``p`` in ``[start, stop)`` with ``p .. p+count-1`` all free (bindable now) and not
    handed out by this process lately; the range is then recorded as handed out
    (:data:`smetric.core.ports.HANDED_OUT`)."""
    if count < 1:
        raise ValueError("count must be >= 1")
    port = start
    while port + count <= stop:
        block = range(port, port + count)
        bad = next((p for p in block if p in ports.HANDED_OUT or not port_is_free(p, host)), None)
        if bad is None and ports.HANDED_OUT.claim(block):
            return port
        port = (bad if bad is not None else port) + 1
    raise BenchError(f"no {count} consecutive free ports in [{start}, {stop}) on {host}")


def require_free(ports: Sequence[int], what: str, host: str = "127.0.0.1") -> None:
    taken = [p for p in ports if not port_is_free(p, host)]
    if taken:
        raise BenchError(f"{what}: port(s) {', '.join(map(str, taken))} on {host} already in use")


async def wait_http_ok(
    url: str, supervisor: Supervisor | None, timeout_s: float, what: str, interval_s: float = 0.2
) -> None:
    """Poll ``url`` until it answers 200 (:class:`BenchError` after ``timeout_s``); fail fast if a
    child of ``supervisor`` (when given) dies meanwhile."""
    loop = asyncio.get_running_loop()
    deadline = loop.time() + timeout_s
    last = "no answer"
    async with aiohttp.ClientSession(timeout=aiohttp.ClientTimeout(total=2.0)) as session:
        while loop.time() < deadline:
            if supervisor is not None:
                supervisor.check_alive()
            try:
                async with session.get(url) as resp:
                    if resp.status == 200:
                        return
                    last = f"HTTP {resp.status}"
            except (aiohttp.ClientError, OSError, TimeoutError) as exc:
                last = type(exc).__name__
            await asyncio.sleep(interval_s)
    raise BenchError(f"{what} not healthy at {url} after {timeout_s:.0f} s ({last})")
