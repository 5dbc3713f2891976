"""The picker's policy config file (YAML), validated at the trust boundary with pydantic.

The format and its schema are :mod:`smetric.policy.pickerconfig` (in the core: the simulator reads
the same files); this module adds what only the picker does: ``--config-text``, and the upstream
``EndpointPickerConfig`` translated to the picker's own format. An empty path gives the defaults:
the default policy of a pool without a global tier (lmetric), colocated, no PD.

The upstream picker's ``EndpointPickerConfig`` (``apiVersion: inference.networking.x-k8s.io/v1alpha1``,
``plugins`` + ``schedulingProfiles``) is accepted too: :mod:`smetric.epp.upstream.translate` maps it
to this format and returns warnings for what maps only approximately or not at all.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import yaml
from pydantic import ValidationError

from smetric.core.validation import describe
from smetric.epp.upstream.epc import EndpointPickerConfig, is_upstream
from smetric.epp.upstream.translate import TranslateError, translate
from smetric.policy.pickerconfig import (
    ConfigError,
    PdSection,
    PickerConfig,
    PolicySection,
    SaturationSection,
    policy_params,
    read_yaml,
    validate_config,
    with_mode,
    yaml_problem,
)

__all__ = [
    "ConfigError",
    "LoadedConfig",
    "PdSection",
    "PickerConfig",
    "PolicySection",
    "SaturationSection",
    "load_config",
    "load_picker_config",
    "parse_config",
    "policy_params",
    "read_config",
    "with_mode",
]


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
        return LoadedConfig(validate_config(doc, source))
    try:
        envelope = EndpointPickerConfig.model_validate(doc)
        result = translate(envelope)
    except ValidationError as exc:
        raise ConfigError(f"{source}: {describe(exc)}") from None
    except TranslateError as exc:
        raise ConfigError(f"{source}: {exc}") from None
    return LoadedConfig(validate_config(result.doc, source), result.warnings, upstream=True)


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
            raise ConfigError(f"--config-text: not valid YAML: {yaml_problem(exc)}") from None
        return read_config(doc, "--config-text")
    if not path:
        return LoadedConfig(PickerConfig())
    return read_config(read_yaml(path), str(Path(path)))


def load_config(path: str | Path | None, text: str = "") -> PickerConfig:
    """Read and validate a config file (or text); ``None`` or ``""`` gives the defaults."""
    return load_picker_config(path, text).config
