"""The picker's policy config file (YAML), validated at the trust boundary with pydantic.

Shape (the operator renders exactly the ``policy`` block)::

    policy:
      name: smetric               # one of smetric.policy.registry.POLICY_NAMES (default: DEFAULT_POLICY, llmd-slo)
      parameters: {slack: 1.0}    # context + policy-owned keys, parsed by smetric.policy.params_from_mapping
    pdDisaggregation:
      enabled: false
      nonCachedTokens: null       # selective P/D: take the prefill hop only when the decode pod's
                                  # uncached suffix is >= this many tokens (0: never; null: always)
    saturation:                   # when an endpoint counts as saturated (429 for sheddable requests)
      queueDepthThreshold: 5      # GIE saturation detector defaults
      kvCacheUtilThreshold: 0.8
    servedModels: []              # empty = accept any model (the engine answers 404 itself)

An empty path gives the defaults: the default policy (``DEFAULT_POLICY``, llmd-slo), colocated, no PD.

The upstream picker's ``EndpointPickerConfig`` (``apiVersion: inference.networking.x-k8s.io/v1alpha1``,
``plugins`` + ``schedulingProfiles``) is accepted too: :mod:`smetric.epp.upstream.translate` maps it
to this format and returns warnings for what maps only approximately or not at all.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml
from pydantic import BaseModel, ConfigDict, Field, ValidationError, field_validator

from smetric.epp.upstream.epc import EndpointPickerConfig, is_upstream
from smetric.epp.upstream.translate import TranslateError, translate
from smetric.policy.base import PolicyParams
from smetric.policy.config import params_from_mapping
from smetric.policy.registry import DEFAULT_POLICY, POLICY_NAMES


class ConfigError(ValueError):
    """A bad config file; the message names the file and the offending field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PolicySection(_Strict):
    name: str = DEFAULT_POLICY
    parameters: dict[str, Any] = Field(default_factory=dict)

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


class PickerConfig(_Strict):
    policy: PolicySection = Field(default_factory=PolicySection)
    pdDisaggregation: PdSection = Field(default_factory=PdSection)
    saturation: SaturationSection = Field(default_factory=SaturationSection)
    servedModels: tuple[str, ...] = ()


def _describe(exc: ValidationError) -> str:
    parts = []
    for err in exc.errors():
        where = ".".join(str(p) for p in err["loc"]) or "(top level)"
        parts.append(f"{where}: {err['msg']}")
    return "; ".join(parts)


@dataclass(frozen=True, slots=True)
class LoadedConfig:
    config: PickerConfig
    warnings: tuple[str, ...] = ()  # what an upstream config maps only approximately
    upstream: bool = False


def read_config(doc: object, source: str = "<config>") -> LoadedConfig:
    """Validate either format: the picker's own, or an upstream ``EndpointPickerConfig``."""
    if doc is None:
        return LoadedConfig(PickerConfig())
    if not is_upstream(doc):
        return LoadedConfig(_validate(doc, source))
    try:
        envelope = EndpointPickerConfig.model_validate(doc)
        result = translate(envelope)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_describe(exc)}") from None
    except TranslateError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return LoadedConfig(_validate(result.doc, source), result.warnings, upstream=True)


def _validate(doc: object, source: str) -> PickerConfig:
    try:
        return PickerConfig.model_validate(doc)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {_describe(exc)}") from None


def parse_config(doc: object, source: str = "<config>") -> PickerConfig:
    return read_config(doc, source).config


def load_picker_config(path: str | Path | None, text: str = "") -> LoadedConfig:
    """``--config-file`` or ``--config-text`` (upstream's pair; both set is an error, as upstream)."""
    if path and text:
        raise ConfigError("--config-file and --config-text are mutually exclusive; set one")
    if text:
        try:
            doc = yaml.safe_load(text)
        except yaml.YAMLError as exc:
            raise ConfigError(f"--config-text: not valid YAML: {exc}") from None
        return read_config(doc, "--config-text")
    if not path:
        return LoadedConfig(PickerConfig())
    p = Path(path)
    try:
        doc = yaml.safe_load(p.read_text())
    except OSError as exc:
        raise ConfigError(f"{p}: cannot read config: {exc.strerror}") from None
    except yaml.YAMLError as exc:
        raise ConfigError(f"{p}: not valid YAML: {exc}") from None
    return read_config(doc, str(p))


def load_config(path: str | Path | None, text: str = "") -> PickerConfig:
    """Read and validate a config file (or text); ``None`` or ``""`` gives the defaults."""
    return load_picker_config(path, text).config


def policy_params(cfg: PickerConfig) -> PolicyParams:
    """The policy's parameters: the policies' own mapping parser, so the picker, the operator and
    the simulator read ``parameters`` identically. Bad parameters raise :class:`ConfigError`."""
    try:
        return params_from_mapping(cfg.policy.parameters)
    except ValueError as exc:
        raise ConfigError(f"policy.parameters: {exc}") from None


def with_mode(params: PolicyParams, mode: str) -> PolicyParams:
    return dataclasses.replace(params, mode=mode)  # type: ignore[arg-type]
