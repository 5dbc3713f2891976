"""Thin adapter over :class:`smetric.engine.Instance` for the wall-clock driver.

The driver uses the engine's public API only (``submit``, ``next_event_s``, ``advance``,
``abort``, ``decoded_tokens``). One workaround remains here:

* ``Instance.submit`` runs ``self._pending.extend(self.advance(now_s))``; Python binds
  ``self._pending.extend`` *before* ``advance`` swaps ``_pending`` for a new list, so the events
  that ``advance`` returns there are appended to the detached old list and lost (a request that
  finished just before another arrived never reported ``finished``). :meth:`SafeInstance.submit`
  drains those events itself first and puts them back, so nothing is lost whether or not the
  engine is fixed (reported to the engine's owner).
"""

from __future__ import annotations

from smetric.engine import EngineRequest, Instance


class SafeInstance(Instance):
    """An engine instance whose ``submit`` never drops the events it advances over."""

    def submit(self, request: EngineRequest, now_s: float) -> None:
        early = self.advance(now_s)  # every state change up to now_s, and any pending events
        try:
            super().submit(request, now_s)  # its internal advance(now_s) has nothing left to do
        finally:
            self._pending = early + self._pending
