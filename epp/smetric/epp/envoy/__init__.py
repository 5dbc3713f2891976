"""Envoy in front of the picker: bootstrap generation and a process helper for tests and the bench."""

from smetric.epp.envoy.bootstrap import EnvoyOptions, bootstrap
from smetric.epp.envoy.process import EnvoyError, EnvoyProcess, envoy_binary, free_port, validate

__all__ = ["EnvoyError", "EnvoyOptions", "EnvoyProcess", "bootstrap", "envoy_binary", "free_port", "validate"]
