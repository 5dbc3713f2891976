"""The Envoy bootstrap checked against ``envoy-data-plane``'s typed messages (betterproto2 classes of
Envoy's v3 API) when it is built: a misspelt or unknown field, a wrong type, an unregistered
``typed_config`` type raises :class:`BootstrapError` from :func:`typed_bootstrap`, before any Envoy
sees the config (``envoy --mode validate`` in the integration tests is the second check).
"""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from typing import TYPE_CHECKING, Any

if TYPE_CHECKING:  # imported lazily: the typed API modules take seconds to import
    from envoy_data_plane.envoy.config.bootstrap.v3 import Bootstrap

_TYPE_PREFIX = "type.googleapis.com/"


class BootstrapError(ValueError):
    """The bootstrap does not parse as Envoy's typed ``Bootstrap`` message."""


def _type_urls(node: Any) -> Iterator[str]:
    if isinstance(node, dict):
        url = node.get("@type")
        if isinstance(url, str):
            yield url
        for value in node.values():
            yield from _type_urls(value)
    elif isinstance(node, list):
        for value in node:
            yield from _type_urls(value)


def _register(type_url: str) -> None:
    """Import the envoy-data-plane module that defines ``type_url`` (registers it for ``Any``)."""
    if not type_url.startswith(_TYPE_PREFIX):
        raise BootstrapError(f"typed_config @type {type_url!r} is not a type.googleapis.com URL")
    package = type_url[len(_TYPE_PREFIX) :].rsplit(".", 1)[0]
    try:
        importlib.import_module(f"envoy_data_plane.{package}")
    except ImportError:
        raise BootstrapError(f"no typed message for {type_url!r} in envoy-data-plane") from None


# Fields envoy-data-plane 2.2's ``from_dict`` cannot read: its snake-casing turns ``5xx`` into
# ``5_xx`` (OutlierDetection.consecutive_5xx). They are checked here to be non-negative integers
# and left out of the typed parse; ``envoy --mode validate`` checks them in the integration tests.
_UNPARSED_INT_FIELDS = frozenset(("consecutive_5xx", "enforcing_consecutive_5xx"))


def _without_unparsed(node: Any) -> Any:
    if isinstance(node, dict):
        out = {}
        for k, v in node.items():
            if k in _UNPARSED_INT_FIELDS:
                if not isinstance(v, int) or isinstance(v, bool) or v < 0:
                    raise BootstrapError(
                        f"invalid Envoy bootstrap: {k} must be a non-negative integer, got {v!r}"
                    )
                continue
            out[k] = _without_unparsed(v)
        return out
    if isinstance(node, list):
        return [_without_unparsed(v) for v in node]
    return node


def typed_bootstrap(config: dict[str, Any]) -> Bootstrap:
    """``config`` (Envoy's snake_case JSON/YAML form) as the typed ``Bootstrap`` message."""
    from envoy_data_plane.envoy.config.bootstrap.v3 import Bootstrap

    for url in set(_type_urls(config)):
        _register(url)
    try:
        return Bootstrap.from_dict(_without_unparsed(config))
    except (KeyError, TypeError, ValueError) as exc:
        raise BootstrapError(f"invalid Envoy bootstrap: {exc}") from None
