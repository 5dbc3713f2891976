"""Pool status from its children (pure): phase, per-role replicas, conditions, observedGeneration."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from smetric.core.names import ROLE_LABEL
from smetric.operator.meta import COMPONENT_LABEL, MODEL_SERVER, Manifest

CONDITION_TYPES: tuple[str, ...] = ("Ready", "Progressing", "Degraded", "InvalidSpec")


@dataclass(frozen=True, slots=True)
class Condition:
    type: str
    status: bool
    reason: str
    message: str


def now_rfc3339() -> str:
    return datetime.datetime.now(tz=datetime.UTC).replace(microsecond=0).isoformat().replace("+00:00", "Z")


def merge_conditions(
    previous: Sequence[Mapping[str, Any]], current: Sequence[Condition], generation: int, now: str
) -> list[dict[str, Any]]:
    """Kubernetes-style conditions: ``lastTransitionTime`` changes only when ``status`` flips."""
    before = {c.get("type"): c for c in previous}
    out: list[dict[str, Any]] = []
    for cond in current:
        status = "True" if cond.status else "False"
        old = before.get(cond.type)
        since = old.get("lastTransitionTime") if old and old.get("status") == status else None
        out.append(
            {
                "type": cond.type,
                "status": status,
                "reason": cond.reason,
                "message": cond.message,
                "lastTransitionTime": since or now,
                "observedGeneration": generation,
            }
        )
    return out


def invalid_status(
    message: str, generation: int, previous: Sequence[Mapping[str, Any]], now: str
) -> dict[str, Any]:
    conditions = [
        Condition("InvalidSpec", True, "InvalidSpec", message),
        Condition("Ready", False, "InvalidSpec", "the spec is invalid; nothing was applied"),
        Condition("Progressing", False, "InvalidSpec", "waiting for a valid spec"),
        Condition("Degraded", False, "InvalidSpec", ""),
    ]
    return {
        "phase": "Invalid",
        "observedGeneration": generation,
        "conditions": merge_conditions(previous, conditions, generation, now),
    }


def _failed(deployment: Manifest) -> str | None:
    for cond in deployment.get("status", {}).get("conditions", []):
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            return f"{deployment['metadata']['name']}: {cond.get('message', 'replica failure')}"
        if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
            return f"{deployment['metadata']['name']}: progress deadline exceeded"
    return None


def _degraded_reason(failures: Sequence[str], apply_failures: Sequence[str]) -> str:
    if apply_failures:
        return "ApplyFailed"
    return "DeploymentFailure" if failures else "Healthy"


def pool_status(
    pool_name: str,
    rendered: Sequence[Manifest],
    observed: Mapping[str, Manifest | None],
    generation: int,
    previous: Sequence[Mapping[str, Any]],
    now: str,
    apply_failures: Sequence[str] = (),
) -> dict[str, Any]:
    """Status from the rendered Deployments and their live objects (``observed`` by name; None = absent).

    ``apply_failures`` (children the API refused) make the pool Degraded.
    """
    replicas: dict[str, dict[str, int]] = {}
    ready_models = desired_models = 0
    waiting: list[str] = []
    failures: list[str] = []
    for child in rendered:
        if child["kind"] != "Deployment":
            continue
        name = child["metadata"]["name"]
        labels = child["metadata"]["labels"]
        key = labels.get(ROLE_LABEL) or labels[COMPONENT_LABEL]
        desired = int(child["spec"]["replicas"])
        live = observed.get(name)
        ready = int((live or {}).get("status", {}).get("readyReplicas") or 0)
        replicas[key] = {"ready": ready, "desired": desired}
        if labels[COMPONENT_LABEL] == MODEL_SERVER:
            ready_models += ready
            desired_models += desired
        if ready < desired:
            waiting.append(f"{name} {ready}/{desired}")
        failure = _failed(live) if live else None
        if failure:
            failures.append(failure)
    failures += [f"apply failed: {f}" for f in apply_failures]
    all_ready = not waiting and not apply_failures
    if failures:
        phase = "Degraded"
    elif all_ready:
        phase = "Ready"
    else:
        phase = "Progressing"
    conditions = [
        Condition("InvalidSpec", False, "Valid", ""),
        Condition(
            "Ready",
            all_ready,
            "AllReplicasReady" if all_ready else "ReplicasNotReady",
            "all deployments ready" if all_ready else "waiting for " + ", ".join(waiting),
        ),
        Condition("Progressing", not all_ready, "Rollout" if not all_ready else "Stable", ", ".join(waiting)),
        Condition(
            "Degraded", bool(failures), _degraded_reason(failures, apply_failures), "; ".join(failures)
        ),
    ]
    return {
        "phase": phase,
        "observedGeneration": generation,
        "readyReplicas": ready_models,
        "desiredReplicas": desired_models,
        "replicas": replicas,
        "inferencePool": pool_name,
        "endpoints": ready_models,
        "conditions": merge_conditions(previous, conditions, generation, now),
    }
