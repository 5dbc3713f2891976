"""An upstream ``EndpointPickerConfig`` -> the picker's own config mapping, plus warnings.

The picker runs one policy per decision, not a chain of filters and weighted scorers, so an
upstream config is read for what it asks of the pool and mapped to the nearest built-in:

* **This picker's plugin types.** ``smetric-picker`` (``parameters.policy`` names the policy,
  default ``smetric``) and one type per registered policy name (``lmetric``, ``llmd-slo``, ...).
  Their ``parameters`` are the policy parameters of the picker's own format, plus
  ``servedModels``. Two different policies in the routing profile are an error.
* **Profile handlers** (GIE ``single-profile-handler``; llm-d ``pd-profile-handler``,
  ``disagg-profile-handler``) choose colocated or P/D routing. The routing profile is the only
  (or first) profile when colocated, the prefill profile under P/D (the policy picks the prefill
  pod; the decode pod is the least loaded, :mod:`smetric.epp.server.decide`).
* **P/D deciders** (llm-d): ``prefix-based-pd-decider`` ``nonCachedTokens`` becomes
  ``pdDisaggregation.nonCachedTokens`` (the same rule, :mod:`smetric.policy.selective_pd`);
  ``always-disagg-pd-decider`` takes the prefill hop for every request; the older
  ``pd-profile-handler`` ``threshold`` (characters) becomes ``nonCachedTokens`` = threshold / 4.
* **Scorers and pickers** without one of this picker's types (the table in ``docs/picker.md``):
  a latency scorer -> ``llmd-slo``; session affinity -> ``llmd-session``;
  a prefix scorer and load scorers -> ``bailian`` with ``lambda`` = prefix weight / all weights
  (Bailian's linear mix of KV reuse and batch size is the weighted sum's nearest form); a prefix
  scorer alone -> ``bailian`` ``lambda: 1``; load scorers alone -> ``load-balance``; no scorer ->
  ``random`` (every score ties, as upstream's max-score picker then picks at random).
* ``prefix-cache-affinity-filter`` (llm-d-router v0.10.0: stick to endpoints holding most of the
  prompt unless their in-flight tokens make the TTFT worse, then the least token load) ->
  ``lmetric``, whose score (queued prefill tokens + uncached tokens) x batch is that trade in one
  number.
* **Session key.** ``agent-identity`` (llm-d-router v0.10.0) adds the agents' session headers
  (its ``additionalSessionHeaders`` first) to ``sessionHeaders``, after the picker's own
  ``x-session-token``; a ``session-affinity-scorer`` with ``strategy: session_id`` adds its header
  sources (an ``attribute: agent-identity`` source: the agents' headers) in its order.
* **Precise prefix index.** ``precise-prefix-cache-producer`` (or the older
  ``precise-prefix-cache-scorer``) -> ``prefixIndex: {mode: precise}`` with its
  ``tokenProcessorConfig`` block size (``blockSizeTokens``, or the deprecated ``blockSize``) and
  hash seed, and the ``token-producer``'s ``modelName`` as the tokenizer.
* ``utilization-detector`` ``queueDepthThreshold`` / ``kvCacheUtilThreshold`` -> ``saturation``.
* Types whose work is built in here (role filters, the OpenAI parser, the data layer, the P/D
  headers handler) are accepted without a warning; any other type gets a warning naming it and
  is ignored. Every mapping that is not exact is a warning too; none is an exit.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from smetric.epp.upstream.epc import EndpointPickerConfig, PluginSpec, SchedulingProfile
from smetric.policy.pickerconfig import DEFAULT_SESSION_HEADERS
from smetric.policy.registry import POLICY_NAMES, default_policy

SMETRIC_PICKER = "smetric-picker"

SINGLE_HANDLER = "single-profile-handler"
PD_HANDLERS = ("pd-profile-handler", "disagg-profile-handler")
PREFIX_DECIDER = "prefix-based-pd-decider"
ALWAYS_DECIDER = "always-disagg-pd-decider"
DETECTOR = "utilization-detector"
AGENT_IDENTITY = "agent-identity"
# llm-d-router v0.10.0 pkg/epp/framework/plugins/requestcontrol/requestheader/agentidentity/
# agent_identity.go lines 40-55: the built-in headers, in their priority order
AGENT_HEADERS = ("x-claude-code-session-id", "x-session-affinity", "session-id", "session_id")
# sessionaffinity README (same tag): the session_id strategy's default source
SESSION_ID_DEFAULT_HEADER = "x-session-id"
AFFINITY_FILTERS = frozenset({"prefix-cache-affinity-filter"})
PRECISE_PRODUCERS = ("precise-prefix-cache-producer", "precise-prefix-cache-scorer")
TOKEN_PRODUCER = "token-producer"

PREFIX_SCORERS = frozenset({"prefix-cache-scorer", "precise-prefix-cache-scorer"})
LOAD_SCORERS = frozenset(
    {
        "queue-scorer",
        "kv-cache-utilization-scorer",
        "load-aware-scorer",
        "active-request-scorer",
        "running-requests-size-scorer",
        "token-load-scorer",
    }
)
SESSION_SCORERS = frozenset({"session-affinity-scorer"})
LATENCY_SCORERS = frozenset({"latency-scorer"})
SCORERS = PREFIX_SCORERS | LOAD_SCORERS | SESSION_SCORERS | LATENCY_SCORERS
PICKERS = frozenset({"max-score-picker", "random-picker", "weighted-random-picker"})
# Upstream types whose work the picker does itself: no warning.
BUILT_IN = frozenset(
    {
        "decode-filter",
        "prefill-filter",
        "disagg-headers-handler",
        "prefill-header-handler",
        "openai-parser",
        "metrics-data-source",
        "core-metrics-extractor",
        "approx-prefix-cache-producer",
        "inflight-load-producer",
        "token-producer",
        "tokenizer",
        "endpoint-notification-source",  # the precise index subscribes to the engines' KV events itself
        "precise-prefix-cache-producer",  # -> prefixIndex
    }
)


class TranslateError(ValueError):
    """An upstream config that cannot mean anything here (a dangling reference, two policies)."""


@dataclass(frozen=True, slots=True)
class Translation:
    doc: dict[str, Any]  # the picker's own format
    warnings: tuple[str, ...]


def _policy_type(t: str) -> bool:
    return t == SMETRIC_PICKER or t in POLICY_NAMES


def _params(p: PluginSpec) -> dict[str, Any]:
    return dict(p.parameters or {})


def _mapping(value: object) -> Mapping[str, Any]:
    return value if isinstance(value, Mapping) else {}


def _int_param(p: PluginSpec, key: str) -> int | None:
    value = _params(p).get(key)
    if value is None:
        return None
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise TranslateError(
            f"plugin {p.ref!r} ({p.type}): {key} must be a non-negative integer, got {value!r}"
        )
    return value


class _Reader:
    def __init__(self, cfg: EndpointPickerConfig) -> None:
        self.cfg = cfg
        self.warnings: list[str] = []
        self.legacy_threshold: int | None = None  # pd-profile-handler's own threshold (pre-decider)
        self.by_ref: dict[str, PluginSpec] = {}
        for p in cfg.plugins:
            if p.ref in self.by_ref:
                raise TranslateError(f"plugins: two plugins are named {p.ref!r}")
            self.by_ref[p.ref] = p
        self.profiles: dict[str, SchedulingProfile] = {}
        for prof in cfg.schedulingProfiles:
            if prof.name in self.profiles:
                raise TranslateError(f"schedulingProfiles: two profiles are named {prof.name!r}")
            for ref in prof.plugins:
                if ref.pluginRef not in self.by_ref:
                    raise TranslateError(
                        f"schedulingProfiles[{prof.name}]: pluginRef {ref.pluginRef!r} names no plugin"
                    )
            self.profiles[prof.name] = prof

    def of_type(self, *types: str) -> list[PluginSpec]:
        return [p for p in self.cfg.plugins if p.type in types]

    def warn(self, text: str) -> None:
        self.warnings.append(text)


def translate(cfg: EndpointPickerConfig) -> Translation:
    r = _Reader(cfg)
    for section in cfg.unknown_sections():
        r.warn(f"{section}: top-level section unknown to this picker; ignored")
    if cfg.flowControl is not None:
        r.warn(
            "flowControl: upstream flow control (queueing in the picker) is not implemented; ignored "
            "(this picker's own flowControl applies: on by default)"
        )
    pd, routing_profile, decider = _profiles(r)
    doc: dict[str, Any] = {}
    policy, params, served = _policy(r, routing_profile)
    doc["policy"] = {"name": policy, "parameters": params}
    if served is not None:
        doc["servedModels"] = served
    if pd:
        legacy = r.legacy_threshold
        doc["pdDisaggregation"] = {
            "enabled": True,
            "nonCachedTokens": legacy if legacy is not None else _non_cached(r, decider),
        }
    saturation = _saturation(r)
    if saturation:
        doc["saturation"] = saturation
    headers = _session_headers(r)
    if headers is not None:
        doc["sessionHeaders"] = headers
    index = _prefix_index(r)
    if index is not None:
        doc["prefixIndex"] = index
    _report_unknown(r)
    return Translation(doc, tuple(r.warnings))


def _profiles(r: _Reader) -> tuple[bool, SchedulingProfile | None, PluginSpec | None]:
    """(P/D?, the profile whose plugins choose the policy, the P/D decider plugin)."""
    handlers = r.of_type(SINGLE_HANDLER, *PD_HANDLERS)
    if len(handlers) > 1:
        raise TranslateError(f"plugins: more than one profile handler ({', '.join(h.ref for h in handlers)})")
    profiles = list(r.profiles.values())
    handler = handlers[0] if handlers else None
    if handler is None or handler.type == SINGLE_HANDLER:
        if len(profiles) > 1:
            r.warn(
                f"schedulingProfiles: {len(profiles)} profiles without a P/D profile handler; "
                f"the first ({profiles[0].name!r}) routes"
            )
        return False, profiles[0] if profiles else None, None
    params = _params(handler)
    if handler.type == "pd-profile-handler":
        prefill_name = str(params.get("prefillProfile") or "prefill")
        decider_name = str(params.get("deciderPluginName") or "")
    else:
        named = _mapping(params.get("profiles"))
        deciders = _mapping(params.get("deciders"))
        prefill_name = str(named.get("prefill") or "prefill")
        decider_name = str(deciders.get("prefill") or "")
    profile = r.profiles.get(prefill_name)
    if profile is None:
        raise TranslateError(f"plugins[{handler.ref}]: no scheduling profile named {prefill_name!r}")
    if decider_name and decider_name not in r.by_ref:
        raise TranslateError(f"plugins[{handler.ref}]: decider {decider_name!r} names no plugin")
    decider = r.by_ref[decider_name] if decider_name else None
    if decider is None:
        found = r.of_type(PREFIX_DECIDER, ALWAYS_DECIDER)
        decider = found[0] if len(found) == 1 else None
    if handler.type == "pd-profile-handler" and decider is None and handler.parameters:
        r.legacy_threshold = _legacy_threshold(r, handler)
    return True, profile, decider


def _legacy_threshold(r: _Reader, handler: PluginSpec) -> int | None:
    """llm-d v0.3-v0.5 ``pd-profile-handler`` ``threshold``: prefill is skipped when the uncached
    part of the prompt is shorter than ``threshold`` *characters* (0: always disaggregate). As
    tokens at the 4 characters per token both upstream rules assume."""
    chars = _int_param(handler, "threshold")
    if not chars:
        return None
    tokens = -(-chars // 4)
    r.warn(
        f"plugins[{handler.ref}]: threshold {chars} (characters, llm-d before the deciders) -> "
        f"pdDisaggregation.nonCachedTokens {tokens}"
    )
    return tokens


def _non_cached(r: _Reader, decider: PluginSpec | None) -> int | None:
    if decider is None or decider.type == ALWAYS_DECIDER:
        return None
    if decider.type != PREFIX_DECIDER:
        r.warn(
            f"plugins[{decider.ref}]: decider type {decider.type!r} unknown; the prefill hop is always taken"
        )
        return None
    value = _int_param(decider, "nonCachedTokens")
    if not value:
        r.warn(
            f"plugins[{decider.ref}]: nonCachedTokens 0 disables disaggregation (upstream's meaning): "
            "every request is decoded without the prefill hop"
        )
    return value or 0


def _policy(r: _Reader, profile: SchedulingProfile | None) -> tuple[str, dict[str, Any], list[str] | None]:
    refs = [
        (r.by_ref[x.pluginRef], 1.0 if x.weight is None else x.weight)
        for x in (profile.plugins if profile else ())
    ]
    ours = [p for p, _ in refs if _policy_type(p.type)]
    if not ours:  # defined but not referenced by a profile: still the pool's policy
        ours = [p for p in r.cfg.plugins if _policy_type(p.type)]
    if ours:
        names = {_policy_name(p) for p in ours}
        if len(names) > 1:
            raise TranslateError(f"plugins: more than one routing policy ({', '.join(sorted(names))})")
        p = ours[0]
        params = _params(p)
        params.pop("policy", None)
        served = params.pop("servedModels", None)
        if served is not None and (
            not isinstance(served, list) or not all(isinstance(m, str) for m in served)
        ):
            raise TranslateError(f"plugins[{p.ref}]: servedModels must be a list of model names")
        beside = sorted({q.type for q, _ in refs if q.type in SCORERS})
        if beside:
            r.warn(
                f"plugins[{p.ref}]: the policy {_policy_name(p)!r} scores alone; the scorers beside it in "
                f"the profile ({', '.join(beside)}) are ignored"
            )
        return _policy_name(p), params, served
    name, params = _nearest(r, profile, refs)
    return name, params, None


def _policy_name(p: PluginSpec) -> str:
    if p.type != SMETRIC_PICKER:
        return p.type
    name = _params(p).get("policy", "smetric")
    if name not in POLICY_NAMES:
        raise TranslateError(
            f"plugins[{p.ref}]: unknown policy {name!r}; expected one of {', '.join(POLICY_NAMES)}"
        )
    return str(name)


def _nearest(
    r: _Reader, profile: SchedulingProfile | None, refs: Sequence[tuple[PluginSpec, float]]
) -> tuple[str, dict[str, Any]]:
    where = f"schedulingProfiles[{profile.name}]" if profile else "schedulingProfiles"
    weight: dict[str, float] = {}
    for p, w in refs:
        if w > 0:
            weight[p.type] = weight.get(p.type, 0.0) + w
    listed = ", ".join(f"{t}({w:g})" for t, w in weight.items() if t not in BUILT_IN) or "none"
    prefix = sum(w for t, w in weight.items() if t in PREFIX_SCORERS)
    load = sum(w for t, w in weight.items() if t in LOAD_SCORERS)
    if any(t in LATENCY_SCORERS for t in weight):
        return _mapped(r, where, listed, "llmd-slo", {})
    if any(t in SESSION_SCORERS for t in weight):
        return _mapped(r, where, listed, "llmd-session", {})
    if any(t in AFFINITY_FILTERS for t in weight):
        return _mapped(r, where, listed, "lmetric", {})
    if prefix > 0:
        lam = round(prefix / (prefix + load), 4)
        return _mapped(r, where, listed, "bailian", {"lambda": lam})
    if load > 0:
        return _mapped(r, where, listed, "load-balance", {})
    if profile is None:
        # no parameters, so no globalFetchSPerToken: the default of a pool without a global tier
        name = default_policy(False)
        r.warn(f"{where}: no profile; the default policy {name!r} routes")
        return name, {}
    return _mapped(r, where, listed, "random", {})


def _mapped(
    r: _Reader, where: str, listed: str, policy: str, params: dict[str, Any]
) -> tuple[str, dict[str, Any]]:
    extra = "".join(f", {k}={v}" for k, v in params.items())
    r.warn(
        f"{where}: upstream plugins {listed} -> built-in policy {policy!r}{extra} (nearest equivalent; "
        f"name a policy with type {SMETRIC_PICKER!r} to choose one)"
    )
    return policy, params


def _saturation(r: _Reader) -> dict[str, Any]:
    ref = r.cfg.saturationDetector.pluginRef if r.cfg.saturationDetector else ""
    detectors = [r.by_ref[ref]] if ref in r.by_ref else r.of_type(DETECTOR)
    if ref and ref not in r.by_ref:
        raise TranslateError(f"saturationDetector: pluginRef {ref!r} names no plugin")
    out: dict[str, Any] = {}
    for d in detectors[:1]:
        if d.type != DETECTOR:
            r.warn(f"saturationDetector: type {d.type!r} unknown; the utilization defaults apply")
            continue
        params = _params(d)
        if "queueDepthThreshold" in params:
            out["queueDepthThreshold"] = params["queueDepthThreshold"]
        if "kvCacheUtilThreshold" in params:
            out["kvCacheUtilThreshold"] = params["kvCacheUtilThreshold"]
    return out


def _str_list(p: PluginSpec, value: object, key: str) -> list[str]:
    if value is None:
        return []
    if not isinstance(value, list) or not all(isinstance(v, str) and v for v in value):
        raise TranslateError(f"plugins[{p.ref}]: {key} must be a list of header names")
    return list(value)


def _session_headers(r: _Reader) -> list[str] | None:
    """``sessionHeaders`` from ``agent-identity`` and a ``session_id`` session-affinity scorer
    (``None``: neither, the default stays)."""
    agents = r.of_type(AGENT_IDENTITY)
    agent_headers: list[str] = []
    for a in agents[:1]:
        extra = _str_list(a, _params(a).get("additionalSessionHeaders"), "additionalSessionHeaders")
        agent_headers = [*extra, *AGENT_HEADERS]
    sources: list[str] = []
    for scorer in r.of_type(*SESSION_SCORERS):
        params = _params(scorer)
        if params.get("strategy") != "session_id":
            continue
        listed = _mapping(params.get("sessionIdConfig")).get("sources")
        for src in listed if isinstance(listed, list) else [{"header": SESSION_ID_DEFAULT_HEADER}]:
            src = _mapping(src)
            if isinstance(src.get("header"), str) and src["header"]:
                sources.append(src["header"])
            elif src.get("attribute") == AGENT_IDENTITY:
                sources.extend(agent_headers or AGENT_HEADERS)
            else:
                r.warn(f"plugins[{scorer.ref}]: session source {dict(src)!r} is not a header; ignored")
    if not agents and not sources:
        return None
    # the picker's own header first (as upstream's explicit fairness header wins), then the rest
    return list(dict.fromkeys([*DEFAULT_SESSION_HEADERS, *sources, *agent_headers]))


def _prefix_index(r: _Reader) -> dict[str, Any] | None:
    """``prefixIndex`` from a precise producer (``None``: none configured, the flags decide)."""
    producers = r.of_type(*PRECISE_PRODUCERS)
    if not producers:
        return None
    p = producers[0]
    tp = _mapping(_params(p).get("tokenProcessorConfig"))
    out: dict[str, Any] = {"mode": "precise"}
    # llm-d-router v0.10.0 pkg/kvcache/kvblock/token_processor.go lines 36-48: blockSizeTokens, the
    # deprecated blockSize, hashSeed (the engines' PYTHONHASHSEED; "" = unset)
    block = tp.get("blockSizeTokens") or tp.get("blockSize")
    if block is not None:
        if isinstance(block, bool) or not isinstance(block, int) or block < 1:
            raise TranslateError(
                f"plugins[{p.ref}]: tokenProcessorConfig block size must be a positive integer"
            )
        out["blockSize"] = block
    if tp.get("hashSeed") not in (None, ""):
        out["hashSeed"] = str(tp["hashSeed"])
    models = [str(_params(t).get("modelName") or "") for t in r.of_type(TOKEN_PRODUCER)]
    legacy = _mapping(_params(p).get("tokenizersPoolConfig")).get("modelName")  # the scorer's own
    tokenizer = next((m for m in models if m), str(legacy or ""))
    if tokenizer:
        out["tokenizer"] = tokenizer
    else:
        r.warn(f"plugins[{p.ref}]: the precise index needs the engines' tokenizer: pass --tokenizer")
    return out


def _report_unknown(r: _Reader) -> None:
    known = (
        PREFIX_SCORERS
        | LOAD_SCORERS
        | SESSION_SCORERS
        | LATENCY_SCORERS
        | PICKERS
        | BUILT_IN
        | AFFINITY_FILTERS
        | {SINGLE_HANDLER, *PD_HANDLERS, PREFIX_DECIDER, ALWAYS_DECIDER, DETECTOR, AGENT_IDENTITY}
    )
    for p in r.cfg.plugins:
        if p.type not in known and not _policy_type(p.type):
            r.warn(f"plugins[{p.ref}]: type {p.type!r} has no equivalent in this picker; ignored")
