"""The simulator's adapter of the one tier model (:mod:`smetric.router.tier_model`): the two-tier facts the
simulated router gives a policy that reads them (``smetric``, ``smetric-tiered``, every ``X+pieces``) and, in a pool
with a global tier, the framework's g for every other policy too (the flow gate's TTFT estimate and the dispatch
ledger's charge read it; ``SimConfig.framework_g``, docs/overload.md 8e).

Without a global tier it is built only for a policy whose registry entry says ``uses_tier_view``. Per decision it
sets, on each endpoint snapshot:

* ``global_hit_tokens`` (g): one lookup per request (the tier is cluster-wide, so g is the same for every
  instance), from ``SimConfig.tier_hits``:

  - ``estimate`` (default): the picker's write estimate, :class:`~smetric.router.tier_model.GlobalTierModel`
    fed the routed prompts (their whole LMCache chunks), as large as the tier -- what the operator's deployment
    gives the picker (LMCache publishes no KV events unless ``enable_kv_events``, which it does not render);
  - ``events``: the same model fed the simulated tier's store events (blocks newly stored; no removals, as
    LMCache's ``CacheStoreEvent``), bounded by the tier's capacity;
  - ``exact``: the simulated tier's content, an oracle no deployed picker has (ablations only).

  The picker's adapter (``smetric.epp.server.tier_facts``) feeds the same model; the keys here are the chained
  block ids of the trace (a prompt's pieces expanded), one key per ``block_tokens``.
* ``node``: the instance's node (``EngineConfig.node``: 8 GPUs per node, as the paper's servers,
  :func:`smetric.engine.global_tier.instances_per_node`);
* ``session_kv_tokens``: the footprint tracker (:mod:`smetric.policy.footprint`), charged at dispatch with the
  tokens the request writes into its target's local tier (``L - c``).

The link backlog is not read from the simulated links (the picker cannot see them): the policy derives it from the
ledger's queued fetch seconds per node (``queued_fetch_s``).
"""

from __future__ import annotations

from bisect import bisect_right
from collections.abc import Sequence
from typing import overload

from smetric.core.views import EndpointSnapshot, RequestView
from smetric.engine import EngineRequest, Instance, Piece
from smetric.policy.footprint import FootprintTracker
from smetric.policy.smetric_tiered import with_tier_facts
from smetric.router.tier_model import GlobalTierModel


def block_keys(pieces: Sequence[Piece]) -> list[int]:
    """A prompt's chained block ids, one per block (each stands for its whole prefix)."""
    return [x for a, b in pieces for x in range(a, b + 1)]


class BlockChain(Sequence[int]):
    """:func:`block_keys` without expanding it: ``len`` and indexing over the pieces (bisect on their
    cumulative lengths). g's binary search reads O(log n) keys of a prompt that has thousands, at
    every probe of a queued request; a slice expands to the list."""

    __slots__ = ("_ends", "_starts")

    def __init__(self, pieces: Sequence[Piece]) -> None:
        self._starts = [a for a, _ in pieces]
        ends: list[int] = []
        n = 0
        for a, b in pieces:
            n += b - a + 1
            ends.append(n)  # keys before the next piece
        self._ends = ends

    def __len__(self) -> int:
        return self._ends[-1] if self._ends else 0

    @overload
    def __getitem__(self, i: int) -> int: ...
    @overload
    def __getitem__(self, i: slice) -> list[int]: ...
    def __getitem__(self, i: int | slice) -> int | list[int]:
        if isinstance(i, slice):
            return [self[j] for j in range(*i.indices(len(self)))]
        n = len(self)
        if i < 0:
            i += n
        if not 0 <= i < n:
            raise IndexError(i)
        k = bisect_right(self._ends, i)
        before = self._ends[k - 1] if k else 0
        return self._starts[k] + (i - before)


class _StoreEvents:
    """The simulated tier's store events into the model; removals dropped (LMCache publishes none)."""

    __slots__ = ("_model",)

    def __init__(self, model: GlobalTierModel) -> None:
        self._model = model

    def blocks_stored(self, pieces: Sequence[Piece]) -> None:
        self._model.stored(block_keys(pieces))

    def blocks_removed(self, pieces: Sequence[Piece]) -> None:
        """Not published by LMCache's connector: the model never sees a removal."""


class TierView:
    __slots__ = ("_block_tokens", "_footprint", "_model", "_node_facts", "_nodes", "_tier")

    def __init__(
        self,
        instances: Sequence[Instance],
        block_tokens: int,
        footprint_window_s: float,
        *,
        hits: str = "estimate",
        chunk_tokens: int | None = None,
        node_facts: bool = True,
    ) -> None:
        self._tier = next((inst.global_tier for inst in instances if inst.global_tier is not None), None)
        self._nodes = [f"node-{inst.config.node}" for inst in instances]
        self._block_tokens = block_tokens
        self._footprint = FootprintTracker(footprint_window_s)
        # node and footprint too (smetric-tiered; PolicyEntry.uses_node_facts); the others read only g
        self._node_facts = node_facts
        self._model: GlobalTierModel | None = None
        if self._tier is not None and hits != "exact":
            # no memory budget: the simulated tier is the bound (a full tier: unbounded, as the picker's
            # estimate up to its budget)
            self._model = GlobalTierModel(block_tokens, self._tier.capacity_blocks, None, chunk_tokens)
            if hits == "events":
                self._tier.observe_stores(_StoreEvents(self._model))

    @property
    def model(self) -> GlobalTierModel | None:
        """The tier model (``None`` without a tier or with the ``exact`` oracle)."""
        return self._model

    def global_hit(self, request: EngineRequest) -> int:
        if self._tier is None:
            return 0
        if self._model is None:  # the oracle
            return min(request.prompt_tokens, self._tier.match(request.prompt_pieces) * self._block_tokens)
        return self._model.global_hit(BlockChain(request.prompt_pieces), request.prompt_tokens)

    @property
    def sets_only_g(self) -> bool:
        """:meth:`enrich` changes nothing but g (a tier, no node facts): the router view can build the
        snapshots with :meth:`global_hit` directly instead of copying each one."""
        return self._tier is not None and not self._node_facts

    def enrich(
        self, snaps: list[EndpointSnapshot], request: EngineRequest, now_s: float
    ) -> list[EndpointSnapshot]:
        fp, nodes = self._footprint.tokens, self._nodes
        if self._tier is None:  # no global tier: g stays what the router core estimated (0)
            if not self._node_facts:
                return snaps
            return [
                with_tier_facts(s, s.global_hit_tokens, nodes[i], fp(s.name, now_s))
                for i, s in enumerate(snaps)
            ]
        g = self.global_hit(request)
        if not self._node_facts:
            return [with_tier_facts(s, g, s.node, s.session_kv_tokens) for s in snaps]
        return [with_tier_facts(s, g, nodes[i], fp(s.name, now_s)) for i, s in enumerate(snaps)]

    def dispatched(
        self,
        snap: EndpointSnapshot,
        view: RequestView,
        now_s: float,
        prompt: Sequence[Piece] = (),
        prompt_tokens: int = 0,
    ) -> None:
        if self._node_facts:
            self._footprint.add(
                snap.name, view.prompt_tokens - min(view.prompt_tokens, snap.local_hit_tokens), now_s
            )
        self.routed(prompt, prompt_tokens)

    def routed(self, prompt: Sequence[Piece], prompt_tokens: int) -> None:
        """A routed prompt: the write estimate records it, the events source refreshes its held prefix."""
        if self._model is not None and prompt:
            self._model.routed(block_keys(prompt), prompt_tokens)
