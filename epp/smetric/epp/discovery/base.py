"""The discovery extension point: push the current Ready endpoint set to one callback."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Protocol

from smetric.epp.contracts import EndpointInfo

OnEndpoints = Callable[[Sequence[EndpointInfo]], None]


class Discovery(Protocol):
    async def start(self, on_change: OnEndpoints) -> None:
        """Deliver the initial endpoint set to ``on_change`` before returning, later sets on change."""
        ...

    async def stop(self) -> None: ...

    @property
    def synced(self) -> bool:
        """The first complete listing was delivered (the picker's readiness)."""
        ...


def kv_events_endpoint(ip: str, port: int) -> str:
    """``tcp://ip:port`` of an engine's KV-event publisher; ``""`` when ``port`` is 0 (disabled)."""
    if port <= 0:
        return ""
    host = f"[{ip}]" if ":" in ip else ip
    return f"tcp://{host}:{port}"
