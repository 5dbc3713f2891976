"""What the simulated router knows: the picker's router core fed with the simulated engines.

The router state is :class:`smetric.router.RouterCore`, the very code the picker runs (dispatch
ledger, staleness, online prefill-rate learning, saturation); this module only feeds it:

* Engine gauges (``running``, ``waiting``, ``kv_usage``) are scraped every ``refresh_s``
  (default 50 ms, the picker's scrape interval). The simulator processes events in time order,
  so the state seen when the first event after a scrape tick is processed is exactly the state
  at that tick: the snapshot taken then is what a periodic scraper would have read. Staleness is
  the core's: the time since the last scrape over ``staleness_s`` (never here: simulated scrapes
  do not fail).
* ``c[i]``: each instance's own prefix cache, looked up per request (the picker's precise
  prefix index fed by KV events; here without event lag).
* The dispatch ledger is charged at dispatch with :func:`smetric.router.dispatch_work` (the
  tokens really computed, global-tier fetch seconds apart) and released at the first token.

Two views (``SimConfig.router_view``):

* ``deployed`` (default): what the picker deploys. The cost model is fitted from observed
  queue-free prefill timings of the simulated engine (:mod:`smetric.sim.calibrate`), not read
  from the engine model; each first token gives a prefill-rate sample (cost of the computed
  tokens -- the engine's reported local + global hit not computed, as vLLM's ``cached_tokens``
  -- over the TTFT since dispatch); the global-tier hit ``g`` is the picker's estimate
  (:func:`smetric.router.estimated_global_hit`: the session's previous turn when a global tier
  is configured).
* ``oracle``: an all-knowing router. The engine's own cost model, prefill speed 1.0 (no
  learning), and ``g`` read from the simulated global tier's content.

``legacy_ledger`` reproduces the phantom-load bug (``g = 0`` in the charge: ``cost(L - c, L)``
even when the global tier supplies the tokens) so its effect can be measured.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from typing import Literal

from smetric.core.costmodel import CostModel
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.engine import EngineRequest, Instance
from smetric.engine.request import RequestTiming
from smetric.router import RouterCore, ScrapedGauges

RouterViewKind = Literal["deployed", "oracle"]
ROUTER_VIEWS: tuple[str, ...] = ("deployed", "oracle")


class RouterView:
    """Builds the :class:`EndpointSnapshot` list for each routing decision through the core."""

    __slots__ = (
        "_dirty",
        "_gauges",
        "_global",
        "_inflight",
        "_instances",
        "_last_scrape_s",
        "_learn",
        "_next_tick_s",
        "_now_s",
        "_refresh_s",
        "_tier",
        "capacity_tokens",
        "core",
        "names",
        "scrapes",
    )

    def __init__(
        self,
        instances: Sequence[Instance],
        core: RouterCore,
        refresh_s: float,
        *,
        learn_rates: bool = True,
        global_hits: Literal["estimate", "tier", "none"] = "estimate",
    ) -> None:
        if not (refresh_s > 0 and math.isfinite(refresh_s)):
            raise ValueError(f"refresh_s must be a positive number, got {refresh_s}")
        n = len(instances)
        self._instances = list(instances)
        self.core = core
        self._refresh_s = refresh_s
        self._learn = learn_rates
        self._global = global_hits
        self._tier = next((inst.global_tier for inst in instances if inst.global_tier is not None), None)
        self._next_tick_s = 0.0
        self._now_s = 0.0
        self._last_scrape_s = 0.0
        self.names = [inst.name for inst in instances]
        self.capacity_tokens = [inst.max_tokens() for inst in instances]
        self._gauges: dict[str, ScrapedGauges] = {
            name: ScrapedGauges(0, 0, 0.0, cap, 0.0)
            for name, cap in zip(self.names, self.capacity_tokens, strict=True)
        }
        # request key -> (instance, dispatch time, prompt tokens): the TTFT sample at the first token
        self._inflight: dict[int, tuple[int, float, int]] = {}
        self._dirty: set[int] = set(range(n))
        self.scrapes = 0

    def changed(self, instance: int) -> None:
        """The simulator touched this instance: its gauges may differ at the next scrape."""
        self._dirty.add(instance)

    def observe(self, now_s: float) -> None:
        """Call before processing each event: scrapes if a tick passed since the last scrape.

        Only instances touched since the previous scrape are re-read (the others' gauges cannot
        have changed: engine state changes only when the simulator calls the engine); every
        instance's scrape time advances, as a periodic scraper's would.
        """
        self._now_s = now_s
        if now_s < self._next_tick_s:
            return
        tick = math.floor(now_s / self._refresh_s) * self._refresh_s
        gauges, names, caps = self._gauges, self.names, self.capacity_tokens
        for i in self._dirty:
            inst = self._instances[i]
            gauges[names[i]] = ScrapedGauges(inst.num_running, inst.num_waiting, inst.kv_usage, caps[i], tick)
        self._dirty.clear()
        self._last_scrape_s = tick
        self.scrapes += 1
        self._next_tick_s = tick + self._refresh_s

    def snapshots(
        self, request: EngineRequest, view: RequestView, global_hit_tokens: int | None = None
    ) -> tuple[list[int], list[EndpointSnapshot]]:
        """``(c, snapshots)``: local hits and one snapshot per instance for ``request``;
        ``global_hit_tokens`` given (the tier view's g) replaces this view's own g."""
        hits = [inst.local_hit_tokens(request) for inst in self._instances]
        # every instance is scraped at every tick (an untouched one's gauges are not rebuilt:
        # they cannot have changed), so one scrape time stands for all
        if global_hit_tokens is not None:
            g = global_hit_tokens
        elif self._global == "estimate":
            g = self.core.global_hit(view)
        elif self._global == "tier" and self._tier is not None:
            bt = self._instances[0].config.block_tokens
            g = min(request.prompt_tokens, self._tier.match(request.prompt_pieces) * bt)
        else:
            g = 0
        snaps = self.core.snapshots(
            self.names,
            dict(zip(self.names, hits, strict=True)),
            self._gauges.get,
            self._now_s,
            scraped_at_s=self._last_scrape_s,
            global_hit_tokens=g,
        )
        return hits, snaps

    def dispatched(
        self, key: int, instance: int, view: RequestView, snapshot: EndpointSnapshot, now_s: float
    ) -> None:
        """Charge the ledger with what the request will cost ``snapshot``'s instance."""
        self.core.dispatch(key, self.names[instance], self.core.work(view, snapshot))
        self._inflight[key] = (instance, now_s, view.prompt_tokens)

    def first_token(self, key: int, time_s: float = math.nan, timing: RequestTiming | None = None) -> None:
        """Release the request's ledger entry; in the deployed view also learn the prefill rate
        from its observed TTFT (the engine's reported hits are what was not computed)."""
        self.core.prefill_done(key)
        entry = self._inflight.pop(key, None)
        if entry is None or not self._learn or timing is None:
            return
        i, sent_s, prompt_tokens = entry
        cost_s = self.core.observed_cost_s(prompt_tokens, timing.local_hit_tokens + timing.global_hit_tokens)
        self.core.observe_first_token(self.names[i], cost_s, time_s - sent_s)


def make_router_view(
    kind: str,
    instances: Sequence[Instance],
    engine_cost_model: CostModel,
    fitted_cost_model: Callable[[], CostModel],
    refresh_s: float,
    global_fetch_s_per_token: float | None,
    *,
    legacy_ledger: bool = False,
) -> RouterView:
    """The router view of ``kind`` (:data:`ROUTER_VIEWS`); ``fitted_cost_model`` is only called
    for the deployed view, ``engine_cost_model`` only used by the oracle."""
    if kind not in ROUTER_VIEWS:
        raise ValueError(f"router view must be one of {', '.join(ROUTER_VIEWS)}, got {kind!r}")
    deployed = kind == "deployed"
    core = RouterCore(
        fitted_cost_model() if deployed else engine_cost_model,
        global_fetch_s_per_token=global_fetch_s_per_token,
    )
    hits: Literal["estimate", "tier", "none"] = (
        "none" if legacy_ledger else ("estimate" if deployed else "tier")
    )
    return RouterView(instances, core, refresh_s, learn_rates=deployed, global_hits=hits)
