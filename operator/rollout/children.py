"""From a canary plan to the children to write, and to the status fields it implies (pure).

Two Deployments behind the one Service: ``<name>-stable`` and ``<name>-canary``. The stable
track keeps the pod template of the stable revision, which the current spec no longer
describes, so while a rollout runs the stable Deployment is only scaled (its template is left
as it is); it is re-applied from the spec once it takes the new revision (promotion, or the
spec pointing back at it). The canary track is applied from the spec at the plan's replicas,
with a policy ConfigMap of its own, and scaled to 0 once no rollout needs it: the operator
never deletes (least privilege; garbage collection removes the children with their owner),
as Argo Rollouts keeps scaled-down ReplicaSets.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specd.api import k8s
from specd.api.spec import ServiceSpec
from specd.operator import manifests
from specd.operator.rollout.canary import Plan, Seen
from specd.operator.rollout.split import actual_weight
from specd.operator.rollout.state import RolloutState, to_status
from specd.operator.status import track_state


@dataclass(frozen=True)
class Apply:
    manifest: dict[str, Any]


@dataclass(frozen=True)
class Scale:
    deployment: str
    replicas: int


Action = Apply | Scale


def track_of(deployment: Mapping[str, Any]) -> str | None:
    return (deployment.get("metadata", {}).get("labels") or {}).get(k8s.LABEL_TRACK)


def seen(deployments: Sequence[Mapping[str, Any]]) -> Seen:
    """Each track's revision and its replicas Ready at that revision."""
    tracks = {track_of(d): track_state(d) for d in deployments}

    def ready(track: str) -> tuple[str | None, int]:
        state = tracks.get(track)
        if state is None:
            return None, 0
        return state.revision, min(state.ready, state.updated) if state.current else 0

    stable_version, stable_ready = ready("stable")
    canary_version, canary_ready = ready("canary")
    return Seen(stable_version, stable_ready, canary_version, canary_ready)


def initial_state(status: Mapping[str, Any] | None, from_status: RolloutState) -> RolloutState:
    """A service switching to Canary keeps what it runs as the stable version."""
    if from_status.stable is None and (status or {}).get("stableRevision"):
        return RolloutState(stable=str(status["stableRevision"]))  # type: ignore[index]
    return from_status


def actions(owner: Mapping[str, Any], spec: ServiceSpec, revision: str, plan: Plan,
            deployments: Sequence[Mapping[str, Any]]) -> list[Action]:
    service = owner["metadata"]["name"]
    policy = spec.policy()
    out: list[Action] = [Apply(manifests.build_configmap(owner, "stable", policy))]
    if plan.stable.version == revision:
        out.append(Apply(manifests.build_deployment(owner, spec, "stable", plan.stable.replicas,
                                                    revision)))
    else:
        out.append(Scale(manifests.deployment_name(service, "stable"), plan.stable.replicas))
    canary = next((d for d in deployments if track_of(d) == "canary"), None)
    if plan.canary is None:
        if canary is not None and canary.get("spec", {}).get("replicas", 0) != 0:
            out.append(Scale(manifests.deployment_name(service, "canary"), 0))
    else:
        out.append(Apply(manifests.build_configmap(owner, "canary", policy)))
        out.append(Apply(manifests.build_deployment(owner, spec, "canary", plan.canary.replicas,
                                                    plan.canary.version)))
    out.append(Apply(manifests.build_service(owner)))
    return out


def rollout_status(plan: Plan, observed: Seen) -> dict[str, Any]:
    """The status fields a canary rollout owns (merged over the core's)."""
    state = plan.state
    status: dict[str, Any] = {
        "canaryRevision": state.canary if not state.aborted else None,
        "canaryWeight": actual_weight(observed.stable_ready, observed.canary_ready)
        if state.canary else 0,
        "currentStep": state.step if state.canary else 0,
        "rollout": {**to_status(state), "setWeight": plan.weight if state.canary else 0},
    }
    if state.stable:
        status["stableRevision"] = state.stable
    return status


def degrade_if_rolled_back(status: dict[str, Any], state: RolloutState,
                           now: str) -> dict[str, Any]:
    """A rolled-back rollout is Degraded with reason RolledBack and the message naming why."""
    if state.phase != "RolledBack":
        return status
    conditions = []
    for condition in status.get("conditions", []):
        if condition.get("type") == "Degraded":
            changed = condition.get("status") != "True"
            condition = {**condition, "status": "True", "reason": "RolledBack",
                         "message": state.message[:1000],
                         "lastTransitionTime": now if changed else
                         condition.get("lastTransitionTime", now)}
        conditions.append(condition)
    return {**status, "phase": "Degraded", "conditions": conditions}


def _number(value: float | None) -> float | None:
    """JSON has no NaN or infinity (Prometheus answers NaN for 0/0): those read as absent."""
    return value if value is not None and math.isfinite(value) else None


def analysis_status(results: Sequence[Any], at: str) -> list[dict[str, Any]]:
    """``status.analysis``: the latest result of every metric (and task group)."""
    return [{"name": r.name, "metric": r.metric, "taskGroup": r.task_group,
             "verdict": r.verdict, "canary": _number(r.canary), "stable": _number(r.stable),
             "value": _number(r.value),
             "message": r.message[:512], "query": r.query[:1024], "at": at}
            for r in results[:32]]
