"""The picker's own config file format (YAML), validated at the trust boundary with pydantic.

Shape (the operator renders exactly the ``policy`` block)::

    policy:
      name: smetric               # one of smetric.policy.registry.POLICY_NAMES (omitted: smetric when
                                  # parameters set globalFetchSPerToken, a global tier; else lmetric)
      parameters: {slack: 1.0}    # context + policy-owned keys, parsed by smetric.policy.params_from_mapping
    pdDisaggregation:
      enabled: false
      nonCachedTokens: null       # selective P/D: take the prefill hop only when the decode pod's
                                  # uncached suffix is >= this many tokens (0: never; null: always)
    saturation:                   # when an endpoint counts as saturated (429 for sheddable requests)
      queueDepthThreshold: 5      # GIE saturation detector defaults
      kvCacheUtilThreshold: 0.8
    servedModels: []              # empty = accept any model (the engine answers 404 itself)
    flowControl:                  # SLO-aware gateway queue (smetric.policy.flowcontrol, docs/overload.md)
      enabled: true               # on by default since 6 Dec 2026 (false: every request goes straight to an engine)
      maxQueued: 1024             # requests held, all flows; a full queue answers 429 at once
      ttlS: 2                     # the longest a request waits, then 429
      shedOnDeadline: true        # 429 once the request's TTFT SLO has passed while it waits
      retryAfterS: 5              # Retry-After of a 429
      slack: 1.0                  # an endpoint meets when its estimate <= slack x the SLO time left
      maxEngineWaiting: 0         # an endpoint whose engine has more waiting takes none
      kvHeadroom: true            # the request's uncached tokens must fit the endpoint's free KV
      lateLast: true              # a resend after a 429 waits below every fresh request
      tpotGuard: true             # an endpoint takes a request only if its decodes keep the TPOT SLO
      filterCandidates: false     # the policy chooses only among the endpoints the gate accepts
      hopelessLast: true          # a request no endpoint could serve in time even idle waits with the late ones
      sessionMissShare: 0         # > 0: an adaptive budget of live sessions (a new session's request gets
                                  # 429 while it binds; docs/overload.md 8g); it halves when more than this
      sessionWindow: 20           # share of a window of returning turns found < half their prompt held
      sessionIdleS: 60            # a session is live until idle this long (requests without a session header
                                  # are not counted)
    sessionHeaders: [x-session-token]  # request headers naming the session, first non-empty wins:
                                  # llmd-session's session id, flow control's flow (lower case)
    prefixIndex: null             # smetric-epp only: {mode: precise | approximate, blockSize,
                                  # tokenizer, hashSeed}; null = the --prefix-index flags decide

It lives in the core because two subsystems read it: the picker (``smetric-epp --config``,
:mod:`smetric.epp.config`, which also accepts the upstream ``EndpointPickerConfig`` and
translates it to this format) and the simulator (``smetric simulate --policy-config``, this
format only).
"""

from __future__ import annotations

import dataclasses
import re
from collections.abc import Mapping
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator, model_validator

from smetric.core.validation import describe
from smetric.policy.base import PolicyParams
from smetric.policy.flowcontrol import FlowControlConfig
from smetric.policy.params_mapping import params_from_mapping
from smetric.policy.registry import DEFAULT_POLICY_WITHOUT_GLOBAL_TIER, POLICY_NAMES, default_policy

# The upstream EndpointPickerConfig's markers (inference.networking.x-k8s.io/v1alpha1): the
# picker's own format has none of them.
UPSTREAM_KEYS: tuple[str, ...] = ("plugins", "schedulingProfiles")
UPSTREAM_API_GROUP = "inference.networking.x-k8s.io"
UPSTREAM_KIND = "EndpointPickerConfig"


class ConfigError(ValueError):
    """A bad config file; the message names the file and the offending field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PolicySection(_Strict):
    """``name`` omitted: the default policy of a pool with a global KV tier when ``parameters``
    set ``globalFetchSPerToken`` (the pool has one), else that of a pool without
    (:func:`smetric.policy.registry.default_policy`)."""

    name: str = DEFAULT_POLICY_WITHOUT_GLOBAL_TIER
    parameters: dict[str, Any] = Field(default_factory=dict)

    @model_validator(mode="before")
    @classmethod
    def _default_name(cls, data: Any) -> Any:
        if not isinstance(data, dict) or "name" in data:
            return data
        params = data.get("parameters")
        tier = isinstance(params, dict) and any(
            params.get(k) is not None for k in ("globalFetchSPerToken", "global_fetch_s_per_token")
        )
        return {**data, "name": default_policy(tier)}

    @field_validator("name")
    @classmethod
    def _known(cls, v: str) -> str:
        if v not in POLICY_NAMES:
            raise ValueError(f"unknown policy {v!r}; expected one of {', '.join(POLICY_NAMES)}")
        return v


class PdSection(_Strict):
    enabled: bool = False
    nonCachedTokens: int | None = Field(default=None, ge=0)


class SaturationSection(_Strict):
    queueDepthThreshold: int = Field(default=5, ge=0)
    kvCacheUtilThreshold: float = Field(default=0.8, ge=0.0, le=1.0)


class FlowControlSection(_Strict):
    """:class:`smetric.policy.flowcontrol.FlowControlConfig` in the config's camelCase."""

    enabled: bool = True
    maxQueued: int = Field(default=1024, ge=1, le=1_000_000)
    ttlS: float = Field(default=2.0, gt=0, le=3600)
    shedOnDeadline: bool = True
    retryAfterS: float = Field(default=5.0, ge=0, le=3600)
    slack: float = Field(default=1.0, gt=0, le=100)
    maxEngineWaiting: int = Field(default=0, ge=0)
    kvHeadroom: bool = True
    lateLast: bool = True
    tpotGuard: bool = True
    filterCandidates: bool = False
    hopelessLast: bool = True
    sessionMissShare: float = Field(default=0.0, ge=0.0, lt=1.0)
    sessionWindow: int = Field(default=20, ge=1, le=100_000)
    sessionIdleS: float = Field(default=60.0, gt=0, le=86_400)

    def config(self) -> FlowControlConfig:
        return FlowControlConfig(
            enabled=self.enabled,
            max_queued=self.maxQueued,
            ttl_s=self.ttlS,
            shed_on_deadline=self.shedOnDeadline,
            retry_after_s=self.retryAfterS,
            slack=self.slack,
            max_engine_waiting=self.maxEngineWaiting,
            kv_headroom=self.kvHeadroom,
            late_last=self.lateLast,
            tpot_guard=self.tpotGuard,
            filter_candidates=self.filterCandidates,
            hopeless_last=self.hopelessLast,
            session_miss_share=self.sessionMissShare,
            session_window=self.sessionWindow,
            session_idle_s=self.sessionIdleS,
        )


class PrefixIndexSection(_Strict):
    """The prefix index the picker keeps (``smetric-epp``; the simulator has its own). Unset
    fields leave the flags' values (``--tokenizer``, ``--block-size``, ``--hash-seed``)."""

    mode: Literal["precise", "approximate"]
    blockSize: int | None = Field(default=None, ge=1, le=65536)  # tokens per engine KV block
    tokenizer: str = ""  # the engines' tokenizer (precise): a path or a model name
    hashSeed: str | None = None  # the engines' PYTHONHASHSEED (precise block hashes)


DEFAULT_SESSION_HEADERS: tuple[str, ...] = ("x-session-token",)
MAX_SESSION_HEADERS = 16  # a stated bound: each request looks each one up
_HEADER_NAME = re.compile(r"^[!#$%&'*+.^_`|~0-9a-z-]{1,128}$")  # an RFC 9110 token, lower case


class PickerConfig(_Strict):
    policy: PolicySection = Field(default_factory=PolicySection)
    pdDisaggregation: PdSection = Field(default_factory=PdSection)
    saturation: SaturationSection = Field(default_factory=SaturationSection)
    servedModels: tuple[str, ...] = ()
    flowControl: FlowControlSection = Field(default_factory=FlowControlSection)
    sessionHeaders: tuple[str, ...] = Field(
        default=DEFAULT_SESSION_HEADERS, min_length=1, max_length=MAX_SESSION_HEADERS
    )
    prefixIndex: PrefixIndexSection | None = None

    @field_validator("sessionHeaders")
    @classmethod
    def _header_names(cls, names: tuple[str, ...]) -> tuple[str, ...]:
        """Lower case (Envoy hands the picker lower-case names); each a header-name token."""
        out = tuple(dict.fromkeys(n.strip().lower() for n in names))
        bad = [n for n in out if not _HEADER_NAME.match(n)]
        if bad:
            raise ValueError(f"not an HTTP header name: {bad[0]!r}")
        return out


def validate_config(doc: object, source: str = "<config>") -> PickerConfig:
    """The picker's own format; ``None`` (an empty file) gives the defaults."""
    if doc is None:
        return PickerConfig()
    try:
        return PickerConfig.model_validate(doc)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {describe(exc)}") from None


def looks_upstream(doc: object) -> bool:
    """An upstream ``EndpointPickerConfig`` envelope rather than the picker's own format."""
    if not isinstance(doc, Mapping):
        return False
    if doc.get("kind") == UPSTREAM_KIND or str(doc.get("apiVersion", "")).startswith(UPSTREAM_API_GROUP):
        return True
    return any(k in doc for k in UPSTREAM_KEYS)


def read_yaml(path: str | Path) -> object:
    """A config file's YAML document; :class:`ConfigError` naming the file when it cannot be read."""
    p = Path(path)
    try:
        return yaml.safe_load(p.read_text())
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read config: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {yaml_problem(exc)}") from None


def yaml_problem(exc: yaml.YAMLError) -> str:
    """A YAML parse error on one line: where (1-based line and column), what, and in what
    (PyYAML's own text spreads over several lines, with the offending line quoted)."""
    if not isinstance(exc, yaml.MarkedYAMLError):
        return " ".join(str(exc).split())
    mark = exc.problem_mark or exc.context_mark
    where = f"line {mark.line + 1}, column {mark.column + 1}: " if mark is not None else ""
    what = exc.problem or "malformed"
    return where + what + (f" ({exc.context})" if exc.context else "")


def load_own_config(path: str | Path) -> PickerConfig:
    """A file in the picker's own format; an upstream ``EndpointPickerConfig`` is refused with
    a :class:`ConfigError` that says so (only ``smetric-epp`` translates that format)."""
    doc = read_yaml(path)
    if looks_upstream(doc):
        raise ConfigError(
            f"{path}: an upstream EndpointPickerConfig (plugins/schedulingProfiles); this reads the "
            "picker's own format (policy, pdDisaggregation, saturation, servedModels: docs/picker.md)"
        )
    return validate_config(doc, str(path))


def policy_params(cfg: PickerConfig) -> PolicyParams:
    """The policy's parameters: the policies' own mapping parser, so the picker, the operator and
    the simulator read ``parameters`` identically. Bad parameters raise :class:`ConfigError`."""
    try:
        return params_from_mapping(cfg.policy.parameters)
    except ValueError as exc:
        raise ConfigError(f"policy.parameters: {exc}") from None


def with_mode(params: PolicyParams, mode: str) -> PolicyParams:
    return dataclasses.replace(params, mode=mode)  # type: ignore[arg-type]
