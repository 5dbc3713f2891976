"""The upstream ``EndpointPickerConfig`` envelope, validated with pydantic.

Format (GIE ``apix/config/v1alpha1/endpointpickerconfig_types.go``, v1.0.0 and later)::

    apiVersion: inference.networking.x-k8s.io/v1alpha1
    kind: EndpointPickerConfig
    plugins:                       # instances: name (defaults to type), type, parameters
    - {name: p, type: prefix-cache-scorer, parameters: {...}}
    schedulingProfiles:            # named profiles; each lists plugin references (+ scorer weight)
    - {name: default, plugins: [{pluginRef: p, weight: 2}]}
    featureGates: [...]            # v1.5.0+; saturationDetector, dataLayer, flowControl, parser too

The envelope's own fields are checked strictly (a wrong type is an error naming the field, as the
Go decoder fails); top-level keys this model does not know (a newer upstream section) are kept
and reported as warnings by :mod:`smetric.epp.upstream.translate`, never an exit.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from pydantic import BaseModel, ConfigDict, Field

API_GROUP = "inference.networking.x-k8s.io"
API_VERSION = f"{API_GROUP}/v1alpha1"
KIND = "EndpointPickerConfig"


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PluginSpec(_Strict):
    name: str = ""
    type: str = Field(min_length=1)
    parameters: dict[str, Any] | None = None

    @property
    def ref(self) -> str:
        """The name profiles reference it by: ``name``, else ``type`` (upstream's rule)."""
        return self.name or self.type


class SchedulingPlugin(_Strict):
    pluginRef: str = Field(min_length=1)
    weight: float | None = None


class SchedulingProfile(_Strict):
    name: str = Field(min_length=1)
    plugins: tuple[SchedulingPlugin, ...] = ()


class SaturationDetectorRef(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)
    pluginRef: str = ""


class EndpointPickerConfig(BaseModel):
    model_config = ConfigDict(extra="allow", frozen=True)

    apiVersion: str = API_VERSION
    kind: str = KIND
    plugins: tuple[PluginSpec, ...] = ()
    schedulingProfiles: tuple[SchedulingProfile, ...] = ()
    featureGates: tuple[str, ...] = ()
    saturationDetector: SaturationDetectorRef | None = None
    dataLayer: dict[str, Any] | None = None
    flowControl: dict[str, Any] | None = None
    parser: dict[str, Any] | None = None

    def unknown_sections(self) -> tuple[str, ...]:
        return tuple(sorted((self.model_extra or {}).keys()))


def is_upstream(doc: object) -> bool:
    """An upstream envelope: its ``kind``/``apiVersion``, or ``plugins``/``schedulingProfiles`` keys
    (the picker's own format has neither)."""
    if not isinstance(doc, Mapping):
        return False
    if doc.get("kind") == KIND or str(doc.get("apiVersion", "")).startswith(API_GROUP):
        return True
    return "plugins" in doc or "schedulingProfiles" in doc
