"""Ending background tasks (smetric.core.stopping.cancel_and_wait)."""

from __future__ import annotations

import asyncio

import pytest

from smetric.core.stopping import cancel_and_wait


async def test_every_task_is_cancelled_and_has_ended_when_it_returns() -> None:
    unwound: list[str] = []

    async def forever(name: str) -> None:
        try:
            await asyncio.Event().wait()
        finally:
            await asyncio.sleep(0)  # an awaiting cleanup is waited for too
            unwound.append(name)

    a, b = asyncio.create_task(forever("a")), asyncio.create_task(forever("b"))
    await asyncio.sleep(0)
    await cancel_and_wait(a, None, b)  # None: a component that never started its task
    assert a.cancelled() and b.cancelled()
    assert unwound == ["a", "b"]


async def test_a_finished_task_and_no_task_are_fine() -> None:
    done = asyncio.create_task(asyncio.sleep(0))
    await done
    await cancel_and_wait(done)
    await cancel_and_wait()
    await cancel_and_wait(None)


async def test_a_task_that_fails_while_it_unwinds_raises_its_error() -> None:
    async def broken() -> None:
        try:
            await asyncio.Event().wait()
        finally:
            raise RuntimeError("cleanup failed")

    task = asyncio.create_task(broken())
    await asyncio.sleep(0)
    with pytest.raises(RuntimeError, match="cleanup failed"):
        await cancel_and_wait(task)
