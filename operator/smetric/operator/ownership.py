"""Whose object is it: the operator applies a child only when the object of that name is absent or
already this pool's (its ``ownerReferences`` name the pool's uid). Anything else (a Helm-installed
InferencePool or Service of the same name, another controller's object, a leftover of an earlier
pool with the same name) is left alone unless the pool says ``adoptExisting: true``; the pool's
status then names the object and its holder.

The holder is described from what Kubernetes records: the controller ``ownerReference``, Helm's
release annotations (``meta.helm.sh/release-name``/``-namespace``), the ``app.kubernetes.io/managed-by``
label and the field managers in ``managedFields``.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from smetric.operator.meta import FIELD_MANAGER, MANAGED_BY_LABEL, Manifest

HELM_RELEASE = "meta.helm.sh/release-name"
HELM_NAMESPACE = "meta.helm.sh/release-namespace"


def owned_by(obj: Manifest, uid: str) -> bool:
    return any(ref.get("uid") == uid for ref in obj.get("metadata", {}).get("ownerReferences") or [])


def holder(obj: Manifest) -> str:
    """Who holds an object that is not this pool's, in words for the pool's status."""
    meta: Mapping[str, Any] = obj.get("metadata") or {}
    parts: list[str] = []
    annotations = meta.get("annotations") or {}
    if annotations.get(HELM_RELEASE):
        where = annotations.get(HELM_NAMESPACE) or meta.get("namespace", "")
        parts.append(f"Helm release {where}/{annotations[HELM_RELEASE]}".replace(" /", " "))
    for ref in meta.get("ownerReferences") or []:
        role = "controller" if ref.get("controller") else "owner"
        parts.append(f"{role} {ref.get('kind', '?')}/{ref.get('name', '?')} (uid {ref.get('uid', '?')})")
    managed_by = (meta.get("labels") or {}).get(MANAGED_BY_LABEL)
    if managed_by and managed_by != FIELD_MANAGER and not annotations.get(HELM_RELEASE):
        parts.append(f"managed by {managed_by}")
    managers = sorted({str(f.get("manager")) for f in meta.get("managedFields") or [] if f.get("manager")})
    others = [m for m in managers if m != FIELD_MANAGER]
    if others:
        parts.append("field managers " + ", ".join(others))
    return "; ".join(parts) or "created outside this pool"


def not_owned_message(kind: str, name: str, obj: Manifest) -> str:
    return f"{kind}/{name} exists and is not managed by this pool ({holder(obj)})"
