"""Stopping a long-running command on SIGINT (Ctrl-C) and SIGTERM (``timeout``, CI, a pod stop) so
that every ``finally`` and ``async with`` of the command runs and every process it started ends.

Python ends on SIGTERM without running any cleanup, and a child started in its own session
(``start_new_session=True``, as the bench's supervisor does, so it can stop the child's whole
process group) does not get the terminal's Ctrl-C either: without these helpers the children
outlive the command, re-parented to init and holding their ports.

* :func:`run_until_signalled` (asyncio commands: ``bench``, ``chaos``, ``serve``): the first
  SIGINT or SIGTERM cancels the main task; the command's cleanup then runs to its end (its own
  waits are bounded: the supervisor's SIGTERM, then SIGKILL). Further signals during the cleanup
  are ignored, so a second Ctrl-C cannot leave a half-stopped stack. Raises :class:`Interrupted`.
* :func:`sigterm_raises_interrupt` (synchronous commands: ``simulate --cluster``): the first
  SIGTERM raises ``KeyboardInterrupt`` as Ctrl-C does, so the same ``try/finally`` serves both;
  later SIGTERMs are ignored while that cleanup runs.
* :func:`cancel_and_wait`: a component's ``stop()`` ends its background tasks and waits until
  each has unwound.
"""

from __future__ import annotations

import asyncio
import contextlib
import signal
from collections.abc import Coroutine, Iterator
from contextlib import contextmanager
from types import FrameType
from typing import Any, TypeVar

T = TypeVar("T")

STOP_SIGNALS: tuple[signal.Signals, ...] = (signal.SIGINT, signal.SIGTERM)


class Interrupted(Exception):
    """The command was stopped by ``signum``; its cleanup has run. Exit status: :attr:`exit_code`."""

    def __init__(self, signum: int) -> None:
        self.signum = signum
        super().__init__(f"stopped by {signal.Signals(signum).name}")

    @property
    def exit_code(self) -> int:
        """128 + the signal's number, as a shell reports a command ended by that signal."""
        return 128 + self.signum


class Terminated(KeyboardInterrupt):
    """SIGTERM within :func:`sigterm_raises_interrupt`: a ``KeyboardInterrupt`` (so every handler
    of Ctrl-C serves it) that tells its signal apart."""

    signum = signal.SIGTERM

    def __init__(self) -> None:
        super().__init__("stopped by SIGTERM")


async def cancel_and_wait(*tasks: asyncio.Future[Any] | None) -> None:
    """Cancel every task of ``tasks`` (``None`` is skipped), then await each in turn; its
    ``CancelledError`` is swallowed, any other exception it ends with is raised."""
    running = [t for t in tasks if t is not None]
    for task in running:
        task.cancel()
    for task in running:
        with contextlib.suppress(asyncio.CancelledError):
            await task


def interrupt_exit_code(exc: KeyboardInterrupt) -> int:
    """143 for :class:`Terminated`, else 130 (SIGINT), as a shell reports them."""
    return 128 + (signal.SIGTERM if isinstance(exc, Terminated) else signal.SIGINT)


def run_until_signalled(main: Coroutine[Any, Any, T]) -> T:
    """``asyncio.run(main)``; the first SIGINT/SIGTERM cancels ``main`` and, once it has unwound,
    raises :class:`Interrupted`. A ``main`` that ends with CancelledError for another reason
    propagates it unchanged."""

    async def guarded() -> T:
        loop = asyncio.get_running_loop()
        task = asyncio.current_task()
        assert task is not None
        got: list[int] = []

        def on_signal(signum: int) -> None:
            if not got:  # later signals: the cleanup is already under way
                got.append(signum)
                task.cancel()

        for sig in STOP_SIGNALS:
            loop.add_signal_handler(sig, on_signal, sig)
        try:
            result = await main
        except asyncio.CancelledError:
            if got:
                raise Interrupted(got[0]) from None
            raise
        finally:
            for sig in STOP_SIGNALS:
                loop.remove_signal_handler(sig)
        if got:  # ``main`` caught the cancellation and returned: it was stopped all the same
            raise Interrupted(got[0])
        return result

    return asyncio.run(guarded())


@contextmanager
def sigterm_raises_interrupt() -> Iterator[None]:
    """Within the block SIGTERM raises :class:`Terminated`, a ``KeyboardInterrupt`` (as SIGINT does); the previous
    handler is restored on exit. Main thread only (Python delivers signals there)."""

    got: list[int] = []

    def on_term(signum: int, frame: FrameType | None) -> None:
        if not got:  # later signals: the cleanup is already under way
            got.append(signum)
            raise Terminated

    previous = signal.signal(signal.SIGTERM, on_term)
    try:
        yield
    finally:
        signal.signal(signal.SIGTERM, previous)
