"""HTTPRoutes of different pools that would catch the same requests on one Gateway.

Two pools collide when their routes attach to the same Gateway with the same path prefix and
overlapping hostnames (none = every hostname), unless both match the model header
(``gateway.matchModelHeader``) for different served models. The Gateway API then merges or picks
one rule by its precedence order: one pool silently receives the other's traffic.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping
from typing import Any

from smetric.operator.spec import InvalidSpecError, SMetricPoolSpec, parse_spec


def _hosts_overlap(a: tuple[str, ...], b: tuple[str, ...]) -> bool:
    return not a or not b or bool(set(a) & set(b))


def collides(namespace: str, a: SMetricPoolSpec, b: SMetricPoolSpec) -> bool:
    ga, gb = a.gateway, b.gateway
    if ga is None or gb is None:
        return False
    same_parent = (ga.parent_ref.name, ga.parent_ref.namespace or namespace) == (
        gb.parent_ref.name,
        gb.parent_ref.namespace or namespace,
    )
    if not same_parent or ga.path != gb.path or not _hosts_overlap(ga.hostnames, gb.hostnames):
        return False
    told_apart = ga.match_model_header and gb.match_model_header and a.model.served != b.model.served
    return not told_apart


def route_conflicts(
    name: str, namespace: str, spec: SMetricPoolSpec, others: Iterable[Mapping[str, Any]]
) -> list[str]:
    """Messages naming the other pools (same namespace) whose route collides with this one's."""
    out: list[str] = []
    for other in others:
        other_name = (other.get("metadata") or {}).get("name")
        if not other_name or other_name == name:
            continue
        try:
            other_spec = parse_spec(other.get("spec"))
        except InvalidSpecError:
            continue
        if collides(namespace, spec, other_spec):
            assert spec.gateway is not None
            out.append(
                f"HTTPRoute collides with SMetricPool {other_name} (Gateway {spec.gateway.parent_ref.name}, "
                f"path {spec.gateway.path}): set gateway.matchModelHeader on both (body-based routing) "
                "or give each pool its own path or hostnames"
            )
    return out
