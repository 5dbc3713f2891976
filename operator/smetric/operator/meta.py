"""Names, labels, owner references and the spec-hash annotation shared by every child manifest."""

from __future__ import annotations

import hashlib
import json
from dataclasses import dataclass
from typing import Any

GROUP = "smetric.io"
VERSION = "v1alpha1"
KIND = "SMetricPool"
PLURAL = "smetricpools"
API_VERSION = f"{GROUP}/{VERSION}"

FIELD_MANAGER = "smetric-operator"
SPEC_HASH_ANNOTATION = "smetric.io/spec-hash"
POOL_LABEL = "smetric.io/pool"
COMPONENT_LABEL = "app.kubernetes.io/component"
INSTANCE_LABEL = "app.kubernetes.io/instance"
MANAGED_BY_LABEL = "app.kubernetes.io/managed-by"

# Component label values.
MODEL_SERVER = "model-server"
EPP = "endpoint-picker"
MOONCAKE_MASTER = "mooncake-master"
ROUTING = "routing"

Manifest = dict[str, Any]


@dataclass(frozen=True, slots=True)
class PoolRef:
    """Identity of the SMetricPool being rendered (``uid`` is None when rendering offline)."""

    name: str
    namespace: str
    uid: str | None = None

    def child(self, suffix: str) -> str:
        return f"{self.name}-{suffix}" if suffix else self.name

    @property
    def epp_name(self) -> str:
        return self.child("epp")

    @property
    def mooncake_name(self) -> str:
        return self.child("mooncake-master")

    def mooncake_host(self) -> str:
        return f"{self.mooncake_name}.{self.namespace}.svc"


def selector_labels(pool: PoolRef, component: str) -> dict[str, str]:
    """Immutable selector labels (a Deployment's selector cannot change after creation)."""
    return {INSTANCE_LABEL: pool.name, COMPONENT_LABEL: component}


def common_labels(pool: PoolRef, component: str) -> dict[str, str]:
    return {
        "app.kubernetes.io/name": "smetric",
        "app.kubernetes.io/part-of": "smetric",
        MANAGED_BY_LABEL: FIELD_MANAGER,
        POOL_LABEL: pool.name,
        **selector_labels(pool, component),
    }


def owner_reference(pool: PoolRef) -> dict[str, Any]:
    if pool.uid is None:
        raise ValueError("owner reference needs the pool's uid")
    return {
        "apiVersion": API_VERSION,
        "kind": KIND,
        "name": pool.name,
        "uid": pool.uid,
        "controller": True,
        "blockOwnerDeletion": True,
    }


def metadata(
    pool: PoolRef, name: str, component: str, extra_labels: dict[str, str] | None = None
) -> Manifest:
    meta: Manifest = {
        "name": name,
        "namespace": pool.namespace,
        "labels": {**common_labels(pool, component), **(extra_labels or {})},
    }
    if pool.uid is not None:
        meta["ownerReferences"] = [owner_reference(pool)]
    return meta


def spec_hash(manifest: Manifest) -> str:
    """Stable hash of a rendered manifest, ignoring its own hash annotation."""
    body = json.loads(json.dumps(manifest))
    meta = body.get("metadata", {})
    annotations = meta.get("annotations", {})
    annotations.pop(SPEC_HASH_ANNOTATION, None)
    if not annotations:
        meta.pop("annotations", None)
    canonical = json.dumps(body, sort_keys=True, separators=(",", ":"))
    return hashlib.sha256(canonical.encode()).hexdigest()[:20]


def stamp_hash(manifest: Manifest) -> Manifest:
    """Return ``manifest`` with its ``smetric.io/spec-hash`` annotation set."""
    digest = spec_hash(manifest)
    meta = manifest.setdefault("metadata", {})
    meta.setdefault("annotations", {})[SPEC_HASH_ANNOTATION] = digest
    return manifest


def key_of(manifest: Manifest) -> tuple[str, str, str]:
    """``(apiVersion, kind, name)``: identifies a child within its pool's namespace."""
    return manifest["apiVersion"], manifest["kind"], manifest["metadata"]["name"]
