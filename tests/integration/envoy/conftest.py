"""Fixtures of the Envoy tests (stacks in tests.support.envoy_stack)."""

from __future__ import annotations

from collections.abc import AsyncIterator

import pytest

from tests.support.envoy_stack import Stack, make_stack


@pytest.fixture
async def stack() -> AsyncIterator[Stack]:
    async for s in make_stack():
        yield s
