"""What the simulated router knows: stale engine gauges plus its own dispatch ledger.

* Engine gauges (``running``, ``waiting``, ``kv_usage``) are scraped every ``refresh_s``
  (default 50 ms, the picker's scrape interval). The simulator processes events in time order,
  so the state seen when the first event after a scrape tick is processed is exactly the state
  at that tick: the snapshot taken then is what a periodic scraper would have read.
* The dispatch ledger (``q[i]``): prefill tokens and cost-model seconds added at dispatch and
  removed at the request's first token -- exact and immediate, as in the picker.
* ``c[i]``: each instance's own prefix cache, looked up per request (the picker's precise
  prefix index fed by KV events; here without event lag).
* ``prefill_speed`` is 1.0 for every instance (no online estimate: all instances are the same
  preset and the cost model is the step model's prefill term, so the estimate would be 1.0).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from smetric.core.costmodel import CostModel
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.engine import EngineRequest, Instance


class RouterView:
    """Builds the :class:`EndpointSnapshot` list for each routing decision."""

    __slots__ = (
        "_cost",
        "_dirty",
        "_inflight",
        "_instances",
        "_kv",
        "_next_tick_s",
        "_q_cost",
        "_q_tokens",
        "_refresh_s",
        "_running",
        "_waiting",
        "capacity_tokens",
        "names",
        "scrapes",
    )

    def __init__(self, instances: Sequence[Instance], cost_model: CostModel, refresh_s: float) -> None:
        if not (refresh_s > 0 and math.isfinite(refresh_s)):
            raise ValueError(f"refresh_s must be a positive number, got {refresh_s}")
        n = len(instances)
        self._instances = list(instances)
        self._cost = cost_model
        self._refresh_s = refresh_s
        self._next_tick_s = 0.0
        self._running = [0] * n
        self._waiting = [0] * n
        self._kv = [0.0] * n
        self._q_tokens = [0.0] * n
        self._q_cost = [0.0] * n
        self._inflight: dict[int, tuple[int, float, float]] = {}
        self._dirty: set[int] = set(range(n))
        self.names = [inst.name for inst in instances]
        self.capacity_tokens = [inst.max_tokens() for inst in instances]
        self.scrapes = 0

    def changed(self, instance: int) -> None:
        """The simulator touched this instance: its gauges may differ at the next scrape."""
        self._dirty.add(instance)

    def observe(self, now_s: float) -> None:
        """Call before processing each event: scrapes if a tick passed since the last scrape.

        Only instances touched since the previous scrape are re-read (the others' gauges cannot
        have changed: engine state changes only when the simulator calls the engine).
        """
        if now_s < self._next_tick_s:
            return
        for i in self._dirty:
            inst = self._instances[i]
            self._running[i] = inst.num_running
            self._waiting[i] = inst.num_waiting
            self._kv[i] = inst.kv_usage
        self._dirty.clear()
        self.scrapes += 1
        self._next_tick_s = (math.floor(now_s / self._refresh_s) + 1) * self._refresh_s

    def snapshots(self, request: EngineRequest) -> tuple[list[int], list[EndpointSnapshot]]:
        """``(c, snapshots)``: local hits and one snapshot per instance for ``request``."""
        hits = [inst.local_hit_tokens(request) for inst in self._instances]
        snaps = [
            EndpointSnapshot(
                name=self.names[i],
                local_hit_tokens=hits[i],
                queued_prefill_tokens=self._q_tokens[i],
                queued_prefill_cost=self._q_cost[i],
                running=self._running[i],
                waiting=self._waiting[i],
                kv_usage=self._kv[i],
                kv_capacity_tokens=self.capacity_tokens[i],
            )
            for i in range(len(hits))
        ]
        return hits, snaps

    def dispatched(self, key: int, instance: int, view: RequestView, local_hit_tokens: int) -> None:
        n = max(0, view.prompt_tokens - local_hit_tokens)
        cost = self._cost.cost(n, view.prompt_tokens)
        self._q_tokens[instance] += n
        self._q_cost[instance] += cost
        self._inflight[key] = (instance, float(n), cost)

    def first_token(self, key: int) -> None:
        entry = self._inflight.pop(key, None)
        if entry is None:
            return
        i, n, cost = entry
        self._q_tokens[i] = max(0.0, self._q_tokens[i] - n)
        self._q_cost[i] = max(0.0, self._q_cost[i] - cost)
