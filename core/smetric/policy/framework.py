"""The framework the simulator and the picker call instead of a policy directly.

:class:`Router` wraps one policy and enforces, for every request:

* at least one endpoint, else :class:`NoEndpointError` (the picker answers 503);
* stale endpoints (``EndpointSnapshot.stale``) are not shown to the policy while any fresh one
  exists. Documented fallback when *all* are stale: all are candidates and the policy decides
  as usual (the picker sheds sheddable requests itself when every endpoint is saturated);
* the policy's decision is valid (:class:`InvalidDecisionError` otherwise): target an index of
  the candidates, reason one of :data:`smetric.core.names.REASONS`, scores empty or one per
  candidate and never NaN, the target's score finite, fallbacks distinct in-range non-targets;
* ``fallbacks`` are filled when the policy gave none: the other candidates by ascending score,
  excluding ``inf`` (stable, so equal scores keep endpoint order); a policy without scores
  gets the other candidates in cyclic order after the target;
* the returned decision indexes the *caller's* endpoint sequence (stale endpoints get score
  ``inf``), and ``policy.on_dispatch`` is told the target's name.

The hot path allocates only an index list when some endpoints are stale and the score-sorted
fallback list; no per-endpoint dicts.
"""

from __future__ import annotations

import math
from collections.abc import Sequence

from smetric.core.names import REASONS
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import Decision, Policy


class PolicyError(Exception):
    """Base of the routing framework's errors."""


class NoEndpointError(PolicyError):
    """There is no endpoint to route to (empty candidate list)."""


class InvalidDecisionError(PolicyError):
    """A policy returned a decision that violates the :class:`Decision` contract (a policy bug)."""


class Router:
    """Runs one policy under the framework's rules (see the module docstring)."""

    __slots__ = ("_max_fallbacks", "_policy")

    def __init__(self, policy: Policy, max_fallbacks: int | None = None) -> None:
        if max_fallbacks is not None and max_fallbacks < 0:
            raise ValueError(f"max_fallbacks must be >= 0, got {max_fallbacks}")
        self._policy = policy
        self._max_fallbacks = max_fallbacks

    @property
    def policy(self) -> Policy:
        return self._policy

    @property
    def name(self) -> str:
        return self._policy.name

    def pick(self, request: RequestView, endpoints: Sequence[EndpointSnapshot]) -> Decision:
        n = len(endpoints)
        if n == 0:
            raise NoEndpointError(f"no endpoint to route request {request.request_id!r} to")
        fresh = [i for i in range(n) if not endpoints[i].stale]
        index: list[int] | None = fresh if 0 < len(fresh) < n else None
        candidates = endpoints if index is None else [endpoints[i] for i in index]

        d = self._policy.pick(request, candidates)
        _validate(d, len(candidates), self._policy.name)
        fallbacks = d.fallbacks or _default_fallbacks(d, len(candidates))
        if self._max_fallbacks is not None:
            fallbacks = fallbacks[: self._max_fallbacks]

        if index is None:
            out = Decision(d.target, d.reason, d.scores, fallbacks)
        else:
            scores: tuple[float, ...] = ()
            if d.scores:
                full = [math.inf] * n
                for k, i in enumerate(index):
                    full[i] = d.scores[k]
                scores = tuple(full)
            out = Decision(index[d.target], d.reason, scores, tuple(index[k] for k in fallbacks))
        self._policy.on_dispatch(request, endpoints[out.target].name)
        return out


def _validate(d: Decision, n: int, policy: str) -> None:
    def bad(why: str) -> InvalidDecisionError:
        return InvalidDecisionError(f"policy {policy!r} returned an invalid decision: {why} ({d!r})")

    if not isinstance(d.target, int) or isinstance(d.target, bool) or not 0 <= d.target < n:
        raise bad(f"target must be an index in [0, {n})")
    if d.reason not in REASONS:
        raise bad(f"reason must be one of {', '.join(REASONS)}")
    if d.scores:
        if len(d.scores) != n:
            raise bad(f"{len(d.scores)} scores for {n} endpoints")
        if any(math.isnan(s) for s in d.scores):
            raise bad("a score is NaN")
        if not math.isfinite(d.scores[d.target]):
            raise bad("the target's score is not finite")
    if d.fallbacks:
        if len(set(d.fallbacks)) != len(d.fallbacks) or d.target in d.fallbacks:
            raise bad("fallbacks must be distinct and exclude the target")
        if any(not 0 <= f < n for f in d.fallbacks):
            raise bad(f"fallbacks must be indexes in [0, {n})")


def _default_fallbacks(d: Decision, n: int) -> tuple[int, ...]:
    if not d.scores:
        return tuple((d.target + k) % n for k in range(1, n))
    s = d.scores
    return tuple(i for i in sorted(range(n), key=s.__getitem__) if i != d.target and s[i] != math.inf)
