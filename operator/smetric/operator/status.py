"""Pool status from its children (pure): phase, per-role replicas, conditions, observedGeneration."""

from __future__ import annotations

import datetime
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from smetric.core.names import ROLE_LABEL
from smetric.operator.meta import COMPONENT_LABEL, MODEL_SERVER, POOL_LABEL, Manifest

CONDITION_TYPES: tuple[str, ...] = ("Ready", "Progressing", "Degraded", "InvalidSpec", "GatewayAccepted")


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


def _failed(deployment: Manifest, standbys_expected: bool = False) -> str | None:
    """A Deployment's failure, or None. ``standbys_expected``: some replicas are never Ready by
    design (leader election), so the controller's ProgressDeadlineExceeded, which counts them, is no
    failure while the needed replicas are ready (the caller checks that)."""
    for cond in deployment.get("status", {}).get("conditions", []):
        if cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            return f"{deployment['metadata']['name']}: {cond.get('message', 'replica failure')}"
        deadline = cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded"
        if deadline and not standbys_expected:
            return f"{deployment['metadata']['name']}: progress deadline exceeded"
    return None


def _degraded_reason(
    failures: Sequence[str],
    apply_failures: Sequence[str],
    route_conflicts: Sequence[str] = (),
    not_owned: Sequence[str] = (),
) -> str:
    if not_owned:
        return "NotOwned"
    if apply_failures:
        return "ApplyFailed"
    if route_conflicts:
        return "RouteConflict"
    return "DeploymentFailure" if failures else "Healthy"


@dataclass(frozen=True, slots=True)
class ParentState:
    """What the gateway controller wrote in an object's ``status.parents`` (Gateway API convention)."""

    reported: bool  # some parent entry exists
    accepted: bool
    resolved_refs: bool
    rejected: bool  # Accepted or ResolvedRefs explicitly False
    message: str

    def as_status(self) -> dict[str, Any]:
        return {
            "reported": self.reported,
            "accepted": self.accepted,
            "resolvedRefs": self.resolved_refs,
            "message": self.message,
        }


def parent_state(obj: Manifest | None, gateway_name: str | None = None) -> ParentState:
    """``Accepted``/``ResolvedRefs`` from ``status.parents`` (HTTPRoute: the parent Gateway named
    ``gateway_name``; InferencePool: any parent). Not reported yet = not accepted."""
    parents = ((obj or {}).get("status") or {}).get("parents") or []
    conditions: dict[str, Mapping[str, Any]] = {}
    reported = False
    for parent in parents:
        ref = parent.get("parentRef") or {}
        if gateway_name is not None and ref.get("name") not in (None, gateway_name):
            continue
        reported = True
        for cond in parent.get("conditions") or []:
            conditions.setdefault(str(cond.get("type")), cond)
    accepted = conditions.get("Accepted", {}).get("status") == "True"
    resolved = conditions.get("ResolvedRefs", {}).get("status") == "True"
    rejected = any(conditions.get(t, {}).get("status") == "False" for t in ("Accepted", "ResolvedRefs"))
    messages = [
        f"{t}: {c.get('reason', '')} {c.get('message', '')}".strip()
        for t, c in conditions.items()
        if c.get("status") != "True"
    ]
    return ParentState(reported, accepted, resolved, rejected, "; ".join(messages))


@dataclass(frozen=True, slots=True)
class DeploymentsState:
    """The rendered Deployments against their live objects."""

    replicas: dict[str, dict[str, int]]  # role (or component) -> ready / desired
    ready_models: int
    desired_models: int
    waiting: list[str]  # "NAME ready/needed" of those not ready yet
    failures: list[str]  # what _failed reports of the live objects


def deployments_state(
    rendered: Sequence[Manifest], observed: Mapping[str, Manifest | None], leader_elected: Sequence[str]
) -> DeploymentsState:
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
        elected = name in leader_elected
        needed = min(desired, 1) if elected else desired
        if ready < needed:
            waiting.append(f"{name} {ready}/{needed}" + (" (leader)" if elected else ""))
        failure = _failed(live, standbys_expected=elected and ready >= needed) if live else None
        if failure:
            failures.append(failure)
    return DeploymentsState(replicas, ready_models, desired_models, waiting, failures)


@dataclass(frozen=True, slots=True)
class GatewayState:
    """Whether the gateway accepted the pool's HTTPRoute and InferencePool."""

    status: dict[str, Any]  # status.gateway
    ok: bool  # both accepted with resolved references
    message: str  # why not, per kind
    waiting: list[str]
    failures: list[str]  # explicit rejections


def gateway_state(gateway: Mapping[str, Manifest | None], gateway_name: str | None) -> GatewayState:
    route = parent_state(gateway.get("HTTPRoute"), gateway_name)
    pool = parent_state(gateway.get("InferencePool"))
    kinds = (("HTTPRoute", route), ("InferencePool", pool))
    ok = route.accepted and route.resolved_refs and pool.accepted and pool.resolved_refs
    message = ""
    waiting: list[str] = []
    if not ok:
        message = "; ".join(
            f"{kind}: {state.message or ('not accepted yet' if not state.reported else 'not ready')}"
            for kind, state in kinds
            if not (state.accepted and state.resolved_refs)
        )
        waiting.append("gateway (" + message + ")")
    failures = [f"{kind} rejected by the gateway: {state.message}" for kind, state in kinds if state.rejected]
    status = {"httpRoute": route.as_status(), "inferencePool": pool.as_status()}
    return GatewayState(status, ok, message, waiting, failures)


def pool_conditions(
    all_ready: bool,
    waiting: Sequence[str],
    failures: Sequence[str],
    apply_failures: Sequence[str],
    route_conflicts: Sequence[str],
    not_owned: Sequence[str],
    gw: GatewayState | None,
) -> list[Condition]:
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
            "Degraded",
            bool(failures),
            _degraded_reason(failures, apply_failures, route_conflicts, not_owned),
            "; ".join(failures),
        ),
    ]
    if gw is not None:
        conditions.append(
            Condition(
                "GatewayAccepted",
                gw.ok,
                "Accepted" if gw.ok else "WaitingForGateway",
                gw.message or "HTTPRoute and InferencePool accepted with resolved references",
            )
        )
    return conditions


def pool_status(
    pool_name: str,
    rendered: Sequence[Manifest],
    observed: Mapping[str, Manifest | None],
    generation: int,
    previous: Sequence[Mapping[str, Any]],
    now: str,
    apply_failures: Sequence[str] = (),
    gateway: Mapping[str, Manifest | None] | None = None,
    gateway_name: str | None = None,
    route_conflicts: Sequence[str] = (),
    not_owned: Sequence[str] = (),
    leader_elected: Sequence[str] = (),
) -> dict[str, Any]:
    """Status from the rendered Deployments and their live objects (``observed`` by name; None = absent).

    ``leader_elected`` names Deployments whose replicas elect one leader and whose standbys are
    never Ready by design (the picker with ``router.leaderElection``: only the leader passes the
    readiness check, as upstream's, GIE v1.5.0 cmd/epp/runner/health.go 59-72). One ready replica
    makes such a Deployment ready.

    ``apply_failures`` (children the API refused) and ``not_owned`` (children left unapplied because
    an object of that name belongs to someone else) make the pool Degraded. ``gateway`` holds the live
    ``InferencePool`` and ``HTTPRoute`` (by kind) when the pool has a route: Ready then also needs
    the gateway to have accepted both (``status.parents`` Accepted and ResolvedRefs True).
    """
    deps = deployments_state(rendered, observed, leader_elected)
    gw = gateway_state(gateway, gateway_name) if gateway is not None else None
    waiting = [*deps.waiting, *(gw.waiting if gw else ())]
    failures = [*not_owned, *deps.failures, *(f"apply failed: {f}" for f in apply_failures)]
    failures += [*route_conflicts, *(gw.failures if gw else ())]
    all_ready = not waiting and not apply_failures and not not_owned
    if failures:
        phase = "Degraded"
    elif all_ready:
        phase = "Ready"
    else:
        phase = "Progressing"
    conditions = pool_conditions(all_ready, waiting, failures, apply_failures, route_conflicts, not_owned, gw)
    return {
        "phase": phase,
        "observedGeneration": generation,
        "readyReplicas": deps.ready_models,
        "desiredReplicas": deps.desired_models,
        "replicas": deps.replicas,
        "inferencePool": pool_name,
        "selector": f"{POOL_LABEL}={pool_name},{COMPONENT_LABEL}={MODEL_SERVER}",
        "endpoints": deps.ready_models,
        **({"gateway": gw.status} if gw else {}),
        "conditions": merge_conditions(previous, conditions, generation, now),
    }
