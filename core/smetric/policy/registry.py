"""The one policy registry: ``(name, class, Params)`` per routing policy.

Every list of policy names (the picker's config check, the operator's spec check and CRD enum,
``smetric simulate --policies``, the bench) and every policy parameter key (the config parser
:func:`smetric.policy.params_mapping.params_from_mapping`, the generated CRD schema
``router.parameters``) is derived from :data:`REGISTRY`. Adding a policy = its module (class
+ ``Params`` model) and one line in :data:`SHIPPED` (docs/architecture.md, "Add a policy").

``make_policy(name, params)`` builds a fresh policy instance (each instance owns its own
tie-break counter / session table / RNG); an unknown name raises ``ValueError`` listing the
known ones. A :class:`Registry` is immutable; a test or an out-of-tree build makes its own
with :meth:`Registry.with_entries`.
"""

from __future__ import annotations

from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass

from smetric.policy.bailian import Bailian, BailianParams
from smetric.policy.base import Policy, PolicyParams
from smetric.policy.dynamo import Dynamo
from smetric.policy.llmd_session import LlmdSession, LlmdSessionParams
from smetric.policy.llmd_slo import LlmdSlo
from smetric.policy.lmetric import LMetric
from smetric.policy.load_balance import LoadBalance
from smetric.policy.params import NoParams, ParamsModel, SessionParams, SMetricParams
from smetric.policy.pieces import PIECES_SUFFIX, PiecesParams, WithPieces
from smetric.policy.preble import Preble, PrebleParams
from smetric.policy.random_pick import RandomPick
from smetric.policy.round_robin import RoundRobin
from smetric.policy.smetric import SMetric
from smetric.policy.smetric_basic import SMetricBasic
from smetric.policy.smetric_overload import OverloadParams, SMetricOverload
from smetric.policy.smetric_paper import SMetricPaper
from smetric.policy.smetric_slo_tokens import SMetricSloTokens
from smetric.policy.smetric_tiered import SMetricTiered
from smetric.policy.tiered_params import SMetricTieredParams

Factory = Callable[[PolicyParams], Policy]


@dataclass(frozen=True, slots=True)
class PolicyEntry:
    """One registered policy. ``kind``: ``smetric`` (this project's family), ``ablation`` (an
    SMetric ablation of paper §5.4), ``baseline`` (a comparison policy as its project ships it) or
    ``baseline+pieces`` (a baseline with the framework pieces, :func:`with_pieces`). ``uses_tier_view``:
    the policy reads the two-tier endpoint facts (``global_hit_tokens``, ``node``,
    ``session_kv_tokens``); the picker and the simulator build them only then.
    ``uses_node_facts``: of those it also reads ``node`` and ``session_kv_tokens`` (not only g);
    the picker skips them otherwise."""

    name: str
    factory: Factory
    params: type[ParamsModel] = NoParams
    kind: str = "baseline"
    uses_tier_view: bool = False
    uses_node_facts: bool = False


SHIPPED: tuple[PolicyEntry, ...] = (
    PolicyEntry("smetric", SMetric, SMetricParams, "smetric", uses_tier_view=True),
    PolicyEntry("smetric-basic", SMetricBasic, SessionParams, "ablation"),
    PolicyEntry("smetric-overload", SMetricOverload, OverloadParams, "ablation"),
    PolicyEntry("smetric-slo-tokens", SMetricSloTokens, SMetricParams, "ablation"),
    PolicyEntry("smetric-paper", SMetricPaper, SMetricParams, "ablation"),
    PolicyEntry(
        "smetric-tiered",
        SMetricTiered,
        SMetricTieredParams,
        "smetric",
        uses_tier_view=True,
        uses_node_facts=True,
    ),
    PolicyEntry("lmetric", LMetric),
    PolicyEntry("bailian", Bailian, BailianParams),
    PolicyEntry("load-balance", LoadBalance),
    PolicyEntry("llmd-session", LlmdSession, LlmdSessionParams),
    PolicyEntry("llmd-slo", LlmdSlo),
    PolicyEntry("preble", Preble, PrebleParams),
    PolicyEntry("dynamo", Dynamo),
    PolicyEntry("round-robin", RoundRobin),
    PolicyEntry("random", RandomPick),
)


def with_pieces(entry: PolicyEntry) -> PolicyEntry:
    """``X+pieces``: policy ``X`` as shipped with the framework pieces (:mod:`smetric.policy.pieces`): the
    tier-aware work estimate (so it reads g: ``uses_tier_view``) and the overload fallback. Its ``Params`` are
    the pieces' switches; ``X``'s own keys are read as for ``X``."""
    inner = entry.factory

    def factory(params: PolicyParams) -> Policy:
        return WithPieces(inner(params), params)

    return PolicyEntry(
        entry.name + PIECES_SUFFIX,
        factory,
        PiecesParams,
        "baseline+pieces",
        uses_tier_view=True,
        uses_node_facts=entry.uses_node_facts,
    )


# Every baseline "as its project ships it" and "+ the same pieces" SMetric's default has.
BUILTIN: tuple[PolicyEntry, ...] = SHIPPED + tuple(with_pieces(e) for e in SHIPPED if e.kind == "baseline")


@dataclass(frozen=True, slots=True)
class Registry:
    entries: tuple[PolicyEntry, ...]

    def __post_init__(self) -> None:
        names = [e.name for e in self.entries]
        dup = sorted({n for n in names if names.count(n) > 1})
        if dup:
            raise ValueError(f"policy registered twice: {', '.join(dup)}")
        self.param_models()  # every key has one definition

    def __iter__(self) -> Iterator[PolicyEntry]:
        return iter(self.entries)

    @property
    def names(self) -> tuple[str, ...]:
        return tuple(e.name for e in self.entries)

    def names_of(self, kind: str) -> tuple[str, ...]:
        return tuple(e.name for e in self.entries if e.kind == kind)

    def entry(self, name: str) -> PolicyEntry:
        for e in self.entries:
            if e.name == name:
                return e
        raise ValueError(f"unknown routing policy {name!r}; known: {', '.join(self.names)}")

    def param_models(self) -> tuple[type[ParamsModel], ...]:
        """The distinct ``Params`` models, in registration order. A YAML key declared by two
        models must be the same field (a shared base class such as ``SMetricParams``)."""
        models = tuple(dict.fromkeys(e.params for e in self.entries))
        seen: dict[str, tuple[type[ParamsModel], object]] = {}
        for model in models:
            for fname, info in model.model_fields.items():
                key = info.alias or fname
                prior = seen.get(key)
                if prior is not None and repr(prior[1]) != repr(info):
                    raise ValueError(
                        f"parameter {key!r} is declared differently by {prior[0].__name__} and "
                        f"{model.__name__}; share one definition (a common Params base class)"
                    )
                seen[key] = (model, info)
        return models

    def with_entries(self, *entries: PolicyEntry) -> Registry:
        return Registry(self.entries + entries)

    def make(self, name: str, params: PolicyParams | None = None) -> Policy:
        return self.entry(name).factory(PolicyParams() if params is None else params)


REGISTRY = Registry(BUILTIN)
# The default policy of a pool with a global KV tier: SMetric, which on the reported seeds ties the best
# baseline as shipped colocated and wins by +6.9 % under P/D (16 instances, full tier, knee), and ties
# LMetric given the same framework pieces in both: its gain over the baselines as shipped comes from the
# pieces (smetric.policy.pieces), not from its rule (docs/evidence.md, "Fair rivals").
DEFAULT_POLICY = "smetric"
# Without a global tier (the CRD's globalKV.enabled: false, plain vLLM; a picker whose config sets
# no globalFetchSPerToken) SMetric too (LMetric until 5 Dec 2026): its tier pieces are idle and it
# routes by session affinity with SLO-aware moves. Where sessions fit in HBM (two H20s per instance,
# FP8 KV) LMetric collapses once sessions would move and SMetric serves +124 % colocated, +157 % P/D
# at the peak (reported seeds 10-12; development seeds 0-2 the same); with one H20 per instance no
# policy separates at the knee (docs/evidence.md, "No global tier and a small one").
DEFAULT_POLICY_WITHOUT_GLOBAL_TIER = "smetric"


def default_policy(global_tier: bool) -> str:
    """The default policy of a pool with (``True``) or without a global KV tier."""
    return DEFAULT_POLICY if global_tier else DEFAULT_POLICY_WITHOUT_GLOBAL_TIER


def default_policy_words(one: str, two: str) -> str:
    """The defaults in words, for help texts and the CRD: ``one`` when the pools with and without a
    global tier share one default, else ``two``; ``{on}`` / ``{off}`` stand for the defaults."""
    on, off = default_policy(True), default_policy(False)
    return (one if on == off else two).format(on=on, off=off)


POLICY_NAMES: tuple[str, ...] = REGISTRY.names
BASELINE_POLICIES: tuple[str, ...] = REGISTRY.names_of("baseline")
BASELINES_WITH_PIECES: tuple[str, ...] = REGISTRY.names_of("baseline+pieces")
ABLATION_POLICIES: tuple[str, ...] = (*REGISTRY.names_of("ablation"), "smetric")


def known_policies() -> tuple[str, ...]:
    """Registered names, in registration order."""
    return POLICY_NAMES


def uses_tier_view(name: str, registry: Sequence[PolicyEntry] = ()) -> bool:
    """Whether the policy registered as ``name`` reads the two-tier facts (its entry's flag);
    an unknown name raises ``ValueError`` like :func:`make_policy`."""
    reg = Registry(tuple(registry)) if registry else REGISTRY
    return reg.entry(name).uses_tier_view


def uses_node_facts(name: str, registry: Sequence[PolicyEntry] = ()) -> bool:
    """Whether the policy registered as ``name`` reads the nodes and the session footprint too."""
    reg = Registry(tuple(registry)) if registry else REGISTRY
    return reg.entry(name).uses_node_facts


def make_policy(
    name: str, params: PolicyParams | None = None, registry: Sequence[PolicyEntry] = ()
) -> Policy:
    """A fresh instance of the policy registered as ``name`` (in :data:`REGISTRY`, or
    ``registry`` when given)."""
    reg = Registry(tuple(registry)) if registry else REGISTRY
    return reg.make(name, params)
