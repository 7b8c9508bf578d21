"""From a canary plan to the children to write, and to the status fields it implies (pure).

Two Deployments behind the one Service: ``<name>-stable`` and ``<name>-canary``. The stable
track keeps the pod template of the stable revision, which the current spec no longer
describes, so while a rollout runs the stable Deployment is only scaled (its template is left
as it is); it is re-applied from the spec once it takes the new revision (promotion, or the
spec pointing back at it). The canary track is applied from the spec at the plan's replicas,
with a policy ConfigMap of its own, and scaled to 0 once no rollout needs it: the operator
never deletes (least privilege; garbage collection removes the children with their owner),
as Argo Rollouts keeps scaled-down ReplicaSets.

Versions. Under ``spec.rollout.policyChanges: Direct`` a track's version is its pod revision
and a policy edit is hot-reloaded by both tracks at once. Under ``Canary`` it is
``<revision>+<policy version>``: a verification-only edit changes the version, so it rolls out
like a new revision -- the canary track runs it from its own ConfigMap while the stable
ConfigMap is left as it is (it keeps the old policy) until promotion. What a track runs is
read from its Deployment's revision and its ConfigMap's policy-version annotation.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from specd.api import k8s
from specd.api.policy import Policy
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


SEPARATOR = "+"  # between the revision and the policy version in a version


def version(revision: str, policy: Policy, by_policy: bool) -> str:
    """What a track must run: the revision, and with policy canaries the policy too."""
    return f"{revision}{SEPARATOR}{policy.version()}" if by_policy else revision


def revision_of(version: str) -> str:
    return version.split(SEPARATOR, 1)[0]


def track_of(deployment: Mapping[str, Any]) -> str | None:
    return (deployment.get("metadata", {}).get("labels") or {}).get(k8s.LABEL_TRACK)


def seen(deployments: Sequence[Mapping[str, Any]],
         configmaps: Sequence[Mapping[str, Any]] = (), by_policy: bool = False) -> Seen:
    """Each track's version and its replicas Ready at that version."""
    tracks = {track_of(d): track_state(d) for d in deployments}
    policies = {track_of(c): ((c.get("metadata") or {}).get("annotations") or {}).get(
        manifests.POLICY_VERSION_ANNOTATION) for c in configmaps}

    def ready(track: str) -> tuple[str | None, int]:
        state = tracks.get(track)
        if state is None:
            return None, 0
        running = state.revision
        if by_policy and running is not None and policies.get(track):
            running = f"{running}{SEPARATOR}{policies[track]}"
        return running, min(state.ready, state.updated) if state.current else 0

    stable_version, stable_ready = ready("stable")
    canary_version, canary_ready = ready("canary")
    return Seen(stable_version, stable_ready, canary_version, canary_ready)


def initial_state(status: Mapping[str, Any] | None, from_status: RolloutState,
                  observed: Seen | None = None, by_policy: bool = False) -> RolloutState:
    """The state to tick from. A service switching to Canary keeps what it runs as the stable
    version; a switch of policyChanges re-expresses the recorded versions (adding the policy
    the track runs, or dropping it) rather than starting a rollout of what already runs."""
    state = from_status
    if state.stable is None and (status or {}).get("stableRevision"):
        state = RolloutState(stable=str(status["stableRevision"]))  # type: ignore[index]
    observed = observed or Seen(None, 0)

    def fix(recorded: str | None, running: str | None) -> str | None:
        if recorded is None:
            return None
        if not by_policy:
            return revision_of(recorded)
        if SEPARATOR not in recorded and running and revision_of(running) == recorded:
            return running
        return recorded

    stable = fix(state.stable, observed.stable_version)
    canary = fix(state.canary, observed.canary_version)
    if (stable, canary) == (state.stable, state.canary):
        return state
    return replace(state, stable=stable, canary=canary)


def actions(owner: Mapping[str, Any], spec: ServiceSpec, desired: str, plan: Plan,
            deployments: Sequence[Mapping[str, Any]], by_policy: bool = False,
            policy: Policy | None = None, operator_namespace: str | None = None
            ) -> list[Action]:
    """What to apply and scale for ``plan``; ``desired`` is the version the spec asks for,
    ``policy`` the document it renders (the spec's, with the tuner's overlay);
    ``operator_namespace`` is let through the workers' NetworkPolicy."""
    service = owner["metadata"]["name"]
    policy = policy or spec.policy()
    revision = revision_of(desired)
    out: list[Action] = []
    if not by_policy or plan.stable.version == desired:
        # with policy canaries the stable track keeps its policy until it takes the new one
        out.append(Apply(manifests.build_configmap(owner, "stable", policy)))
    if revision_of(plan.stable.version) == revision:
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
                                                    revision_of(plan.canary.version))))
    out.append(Apply(manifests.build_service(owner)))
    out.append(Apply(manifests.build_network_policy(owner, spec, operator_namespace)))
    return out


def rollout_status(plan: Plan, observed: Seen) -> dict[str, Any]:
    """The status fields a canary rollout owns (merged over the core's)."""
    state = plan.state
    status: dict[str, Any] = {
        "canaryRevision": revision_of(state.canary) if state.canary and not state.aborted
        else None,
        "canaryWeight": actual_weight(observed.stable_ready, observed.canary_ready)
        if state.canary else 0,
        "currentStep": state.step if state.canary else 0,
        "rollout": {**to_status(state), "setWeight": plan.weight if state.canary else 0},
    }
    if state.stable:
        status["stableRevision"] = revision_of(state.stable)
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
