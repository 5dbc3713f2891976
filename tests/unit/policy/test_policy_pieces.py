"""The framework pieces (smetric.policy.pieces): every baseline as shipped and + the same pieces -- the tier-aware
work estimate and the overload fallback SMetric's default has."""

from __future__ import annotations

import pytest

from smetric.core.names import REASON_BALANCE, REASON_OVERLOAD, REASON_STICK
from smetric.core.views import EndpointSnapshot, RequestView
from smetric.policy.base import PolicyParams
from smetric.policy.params_mapping import params_from_mapping
from smetric.policy.pieces import PiecesParams, WithPieces, tier_aware_view
from smetric.policy.registry import (
    BASELINE_POLICIES,
    BASELINES_WITH_PIECES,
    REGISTRY,
    make_policy,
    uses_tier_view,
)

FETCH = 1e-5  # s per token: 100k tokens in 1 s
TIER = PolicyParams(global_fetch_s_per_token=FETCH)
L = 100_000


def ep(
    name: str, c: int = 0, g: int = 0, q_tokens: float = 0.0, waiting: int = 0, running: int = 0
) -> EndpointSnapshot:
    return EndpointSnapshot(
        name,
        local_hit_tokens=c,
        queued_prefill_tokens=q_tokens,
        queued_prefill_cost=q_tokens * 1e-4,
        running=running,
        waiting=waiting,
        kv_capacity_tokens=200_000,
        global_hit_tokens=g,
    )


def test_every_baseline_has_a_pieces_twin_that_reads_the_tier() -> None:
    assert tuple(b + "+pieces" for b in BASELINE_POLICIES) == BASELINES_WITH_PIECES
    for name in BASELINES_WITH_PIECES:
        assert uses_tier_view(name) and make_policy(name).name == name
        assert REGISTRY.entry(name).params is PiecesParams
    # its switches are config keys like any policy's
    own = params_from_mapping({"piecesTierAware": False, "piecesFallback": "none"}).get(PiecesParams)
    assert not own.pieces_tier_aware and own.pieces_fallback == "none"


def test_without_a_global_tier_the_pieces_change_nothing() -> None:
    request = RequestView("r", L, est_hit_tokens=L - 1000, turn=3)
    snaps = [ep("a", c=50_000, q_tokens=80_000), ep("b", q_tokens=0.0), ep("c", c=99_000, waiting=9)]
    for name in BASELINE_POLICIES:
        if name in ("random", "round-robin"):
            continue
        plain, pieces = make_policy(name), make_policy(name + "+pieces")
        assert pieces.pick(request, snaps) == plain.pick(request, snaps), name


def test_the_tier_aware_view_charges_the_ledgers_work() -> None:
    request = RequestView("r", L, est_hit_tokens=L - 1000, turn=3)
    a = EndpointSnapshot("a", local_hit_tokens=30_000, queued_fetch_s=0.5, global_hit_tokens=L - 1000)
    (v,) = tier_aware_view(request, [a], TIER)
    assert v.local_hit_tokens == L - 1000  # h = max(c, g)
    assert v.queued_prefill_cost == pytest.approx((L - 1000 - 30_000) * FETCH + 0.5)
    per_token = TIER.cost_model.cost(L, L) / L
    assert v.queued_prefill_tokens == pytest.approx(v.queued_prefill_cost / per_token)


def test_lmetric_with_the_tier_estimate_follows_the_queues_for_an_evicted_session() -> None:
    # the session is evicted from every GPU but the tier holds it: LMetric as shipped chases the endpoint
    # with a stale partial prefix behind a long queue; with the pieces every endpoint costs the same fetch
    request = RequestView("r", L, est_hit_tokens=L - 1000, turn=3)
    g = L - 1000
    snaps = [ep("a", c=60_000, g=g, q_tokens=50_000), ep("b", g=g, q_tokens=0.0)]
    params = PolicyParams(global_fetch_s_per_token=FETCH, own=(PiecesParams(pieces_fallback="none"),))
    assert make_policy("lmetric", params).pick(request, snaps).target == 0
    assert make_policy("lmetric+pieces", params).pick(request, snaps).target == 1


def test_nobody_meets_goes_to_the_least_loaded_engine() -> None:
    # every endpoint has minutes of queued prefill: no TTFT estimate meets; the session's prefix is in the
    # tier, so it moves to the least 4 x waiting + running
    request = RequestView("r", L, est_hit_tokens=L - 1000, turn=3)
    g = L - 1000
    snaps = [
        ep("a", c=g, g=g, q_tokens=5e6, waiting=6, running=4),
        ep("b", g=g, q_tokens=9e6, waiting=1, running=2),
        ep("c", g=g, q_tokens=6e6, waiting=3, running=1),
    ]
    d = make_policy("lmetric+pieces", TIER).pick(request, snaps)
    assert (d.target, d.reason) == (1, REASON_OVERLOAD)
    # the guard off (piecesFallback: none): the policy decides
    off = PolicyParams(global_fetch_s_per_token=FETCH, own=(PiecesParams(pieces_fallback="none"),))
    d = make_policy("lmetric+pieces", off).pick(request, snaps)
    assert d.reason == REASON_BALANCE and d.target != 1
    # a session the tier does not hold would recompute elsewhere: it is not moved by the fallback
    cold = [replace_g(s, 0) for s in snaps]
    assert make_policy("lmetric+pieces", TIER).pick(request, cold).reason == REASON_BALANCE


def replace_g(s: EndpointSnapshot, g: int) -> EndpointSnapshot:
    from dataclasses import replace

    return replace(s, global_hit_tokens=g)


def test_the_wrapper_forwards_dispatch_to_the_policy() -> None:
    seen: list[str] = []

    class Spy:
        name = "spy"

        def pick(self, request: RequestView, endpoints: object) -> object:
            raise AssertionError

        def on_dispatch(self, request: RequestView, endpoint: str) -> None:
            seen.append(endpoint)

    w = WithPieces(Spy(), PolicyParams())  # type: ignore[arg-type]
    w.on_dispatch(RequestView("r", 10), "a")
    assert seen == ["a"] and w.name == "spy+pieces"


def test_the_paper_literal_smetric_is_smetric_without_the_pieces() -> None:
    from smetric.policy.params import SMetricParams

    literal = SMetricParams(balance_estimate="local", meets_estimate="local", nobody_meets="stick")
    request = RequestView("r", L, est_hit_tokens=L - 1000, turn=3)
    g = L - 1000
    snaps = [
        ep("a", c=g, g=g, q_tokens=5e6, waiting=6, running=4),
        ep("b", g=g, q_tokens=9e6, waiting=1, running=2),
    ]
    paper = make_policy("smetric-paper", TIER)
    assert paper.pick(request, snaps) == make_policy("smetric", TIER.with_own(literal)).pick(request, snaps)
    assert paper.pick(request, snaps).target == 0  # nobody meets: the session sticks (algorithms.md)
    assert make_policy("smetric", TIER).pick(request, snaps).target == 1  # the default: least loaded


# cachedMoves: a tier smaller than the pool's KV capacity (here 3 x 200k tokens of HBM) cannot hold what the
# GPUs evict; a session a GPU holds is then routed as without a tier
SMALL = 100_000  # tokens per engine pod: 300k < 600k of HBM
BIG = 250_000  # 750k >= 600k


def _overloaded() -> tuple[RequestView, list[EndpointSnapshot]]:
    request = RequestView("r", L, est_hit_tokens=L - 1000, turn=3)
    g = L - 1000
    return request, [
        ep("a", c=g, g=g, q_tokens=5e6, waiting=6, running=4),
        ep("b", g=g, q_tokens=9e6, waiting=1, running=2),
        ep("c", g=g, q_tokens=6e6, waiting=3, running=1),
    ]


def _params(segment: int | None, moves: str = "backed") -> PolicyParams:
    from smetric.policy.params import SMetricParams

    return PolicyParams(
        global_fetch_s_per_token=FETCH,
        global_segment_tokens=segment,
        # cachedMovesRoom 0: every session (this session fills half its GPU; the room is tested below)
        own=(
            PiecesParams(cached_moves=moves, cached_moves_room=0),  # type: ignore[arg-type]
            SMetricParams(cached_moves=moves, cached_moves_room=0),  # type: ignore[arg-type]
        ),
    )


def test_the_tier_backs_the_gpus_only_when_it_holds_their_kv() -> None:
    from smetric.policy.pieces import stays_put, tier_backs_gpus

    request, snaps = _overloaded()
    assert tier_backs_gpus(snaps, _params(None))  # a fully provisioned tier
    assert tier_backs_gpus(snaps, _params(BIG)) and not tier_backs_gpus(snaps, _params(SMALL))
    unknown = [replace_kv(s, 0) for s in snaps]  # engines that do not report their capacity
    assert tier_backs_gpus(unknown, _params(SMALL))
    assert stays_put(request, snaps, _params(SMALL), 0.5, 0.0)
    assert not stays_put(request, snaps, _params(BIG), 0.5, 0.0)
    # a first turn and a session no GPU holds keep the tier
    assert not stays_put(RequestView("r", L, turn=0), snaps, _params(SMALL), 0.5, 0.0)
    evicted = [replace_c(s, 0) for s in snaps]
    assert not stays_put(request, evicted, _params(SMALL), 0.5, 0.0)
    # no tier at all: nothing to gate
    assert not stays_put(request, snaps, PolicyParams(global_segment_tokens=SMALL), 0.5, 0.0)


@pytest.mark.parametrize("name", ["smetric", "lmetric+pieces"])
def test_a_small_tier_does_not_move_a_session_a_gpu_holds(name: str) -> None:
    request, snaps = _overloaded()
    # nobody meets: with a tier that backs the GPUs the fallback moves the session to the least loaded (b) ...
    assert make_policy(name, _params(BIG)).pick(request, snaps).target == 1
    # ... with a small one it is routed as in a pool without a tier (no g, no fetch): SMetric keeps it on the
    # GPU that holds it (a); LMetric + pieces is LMetric as shipped
    d = make_policy(name, _params(SMALL)).pick(request, snaps)
    no_tier = PolicyParams(own=_params(SMALL).own)
    plain = make_policy(name.removesuffix("+pieces"), no_tier).pick(request, [replace_g(s, 0) for s in snaps])
    assert (d.target, d.reason) == (plain.target, plain.reason)
    if name == "smetric":
        assert (d.target, d.reason) == (0, REASON_STICK)
    # the guard off (cachedMoves: always): the small tier moves it like a big one
    assert make_policy(name, _params(SMALL, "always")).pick(request, snaps).target == 1


@pytest.mark.parametrize("name", ["smetric", "lmetric+pieces"])
def test_cached_moves_room_gates_only_a_session_its_gpu_holds_many_times_over(name: str) -> None:
    from smetric.policy.pieces import stays_put

    request, snaps = _overloaded()  # L = 100k on GPUs of 200k: room for the session twice

    def params(room: float) -> PolicyParams:
        from smetric.policy.params import SMetricParams

        return PolicyParams(
            global_fetch_s_per_token=FETCH,
            global_segment_tokens=SMALL,
            own=(PiecesParams(cached_moves_room=room), SMetricParams(cached_moves_room=room)),
        )

    assert stays_put(request, snaps, params(0), 0.5, 0.0)  # 0: every session (the gate as before)
    assert stays_put(request, snaps, params(2), 0.5, 2.0)  # its GPU holds it twice: gated
    assert not stays_put(request, snaps, params(3), 0.5, 3.0)  # not three times: it keeps the tier
    # the room is read off the GPU that holds the session, not the largest one
    bigger = [snaps[0], *(replace_kv(s, 10 * L) for s in snaps[1:])]
    assert not stays_put(request, bigger, params(3), 0.5, 3.0)
    # a holder that does not report its capacity keeps the gate (the others' 400k of HBM > the tier's 300k)
    assert stays_put(request, [replace_kv(snaps[0], 0), *snaps[1:]], params(3), 0.5, 3.0)
    # through the policies: room 3 lets the overload fallback move it (b), room 2 keeps it routed as without a tier
    assert make_policy(name, params(3)).pick(request, snaps).target == 1
    assert make_policy(name, params(2)).pick(request, snaps).target != 1


def test_a_small_tier_still_balances_an_evicted_session_by_its_copy() -> None:
    request, snaps = _overloaded()
    evicted = [replace_c(s, 0) for s in snaps]
    small, big = make_policy("smetric", _params(SMALL)), make_policy("smetric", _params(BIG))
    assert small.pick(request, evicted) == big.pick(request, evicted)


def replace_kv(s: EndpointSnapshot, cap: int) -> EndpointSnapshot:
    from dataclasses import replace

    return replace(s, kv_capacity_tokens=cap)


def replace_c(s: EndpointSnapshot, c: int) -> EndpointSnapshot:
    from dataclasses import replace

    return replace(s, local_hit_tokens=c)
