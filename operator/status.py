"""Pure status computation: from the spec and the observed Deployments to ``.status``.

No API calls and no clock: the caller passes ``now``. Conditions keep their
lastTransitionTime while their status does not change, and conditions of types this
module does not own (added by rollouts or the tuner) are kept as they are.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

from specd.api import k8s
from specd.api.policy import Policy
from specd.api.spec import (
    CONDITION_DEGRADED,
    CONDITION_PROGRESSING,
    CONDITION_READY,
    ServiceSpec,
)
from specd.operator.manifests import selector_string

OWNED_CONDITIONS = (CONDITION_READY, CONDITION_PROGRESSING, CONDITION_DEGRADED)
# Degraded reasons that come from the object itself (not from the workers): a later status
# refresh triggered by a Deployment event must not clear them; the next reconcile does.
CONFIG_REASONS = ("InvalidSpec", "ApplyRejected", "Forbidden")


@dataclass(frozen=True)
class ConfigError:
    """A problem with the object that retrying will not fix: surfaced as Degraded."""

    reason: str
    message: str


@dataclass(frozen=True)
class TrackState:
    """What one track's Deployment reports."""

    revision: str | None
    desired: int
    replicas: int
    ready: int
    updated: int
    available: int
    current: bool  # the Deployment controller has observed its latest generation
    failure: str | None  # why the Deployment cannot progress, if it cannot


def track_state(deployment: Mapping[str, Any] | None) -> TrackState | None:
    if deployment is None:
        return None
    meta = deployment.get("metadata", {})
    spec = deployment.get("spec", {})
    status = deployment.get("status", {}) or {}
    labels = spec.get("template", {}).get("metadata", {}).get("labels", {}) or {}
    failure = None
    for cond in status.get("conditions", []) or []:
        if cond.get("type") == "Progressing" and cond.get("reason") == "ProgressDeadlineExceeded":
            failure = f"ProgressDeadlineExceeded: {cond.get('message', '')}"
        elif cond.get("type") == "ReplicaFailure" and cond.get("status") == "True":
            failure = f"ReplicaFailure: {cond.get('message', '')}"
    return TrackState(
        revision=labels.get(k8s.LABEL_REVISION),
        desired=int(spec.get("replicas", 1)),
        replicas=int(status.get("replicas", 0) or 0),
        ready=int(status.get("readyReplicas", 0) or 0),
        updated=int(status.get("updatedReplicas", 0) or 0),
        available=int(status.get("availableReplicas", 0) or 0),
        current=int(status.get("observedGeneration", 0) or 0) >= int(meta.get("generation", 0)),
        failure=failure,
    )


def _condition(ctype: str, ok: bool, reason: str, message: str, generation: int,
               previous: Mapping[str, Any] | None, now: str) -> dict[str, Any]:
    status = "True" if ok else "False"
    changed = previous is None or previous.get("status") != status
    return {
        "type": ctype,
        "status": status,
        "reason": reason,
        "message": message,
        "observedGeneration": generation,
        "lastTransitionTime": now if changed else previous.get("lastTransitionTime", now),
    }


def carried_error(status: Mapping[str, Any] | None, generation: int) -> ConfigError | None:
    """The configuration error the last reconcile of this generation found, if any."""
    status = status or {}
    if status.get("observedGeneration") != generation:
        return None
    for cond in status.get("conditions", []) or []:
        if (cond.get("type") == CONDITION_DEGRADED and cond.get("status") == "True"
                and cond.get("reason") in CONFIG_REASONS):
            return ConfigError(cond["reason"], cond.get("message", ""))
    return None


def compute_status(
    *,
    name: str,
    generation: int,
    spec: ServiceSpec | None,
    revision: str | None,
    policy: Policy | None,
    stable: Mapping[str, Any] | None,
    error: ConfigError | None,
    previous: Mapping[str, Any] | None,
    now: str,
    reconciled: bool,
) -> dict[str, Any]:
    """The status fields the operator core owns, ready for a JSON merge patch.

    ``reconciled``: this generation was just reconciled (children applied or found invalid),
    so observedGeneration moves to it; a refresh after a Deployment event keeps the old one.
    ``spec``/``revision``/``policy`` are None when the spec could not be parsed.
    """
    previous = previous or {}
    prev_conds = {c.get("type"): c for c in previous.get("conditions", []) or []}
    desired = spec.replicas if spec is not None else int(previous.get("replicas", 0) or 0)
    state = track_state(stable)
    at_revision = (state is not None and revision is not None and state.revision == revision
                   and state.current and state.desired == desired)
    rolled_out = (at_revision and state.updated == desired and state.replicas == desired
                  and state.available >= desired)

    # Degraded: the object is wrong, or the workers cannot get where they should.
    if error is not None:
        degraded = (True, error.reason, error.message)
    elif state is not None and state.failure is not None:
        reason, _, message = state.failure.partition(": ")
        degraded = (True, reason, message)
    else:
        degraded = (False, "AsExpected", "")

    # Progressing: a Deployment is moving towards the spec.
    if error is not None:
        progressing = (False, "Blocked", "not rolling out: see the Degraded condition")
    elif state is None:
        progressing = (True, "Creating", "creating the worker Deployment")
    elif not rolled_out:
        if state.revision != revision or state.updated < state.replicas:
            progressing = (True, "RollingUpdate",
                           f"{state.updated}/{desired} workers at revision {revision}")
        else:
            progressing = (True, "Scaling", f"{state.replicas} -> {desired} workers")
    else:
        progressing = (False, "Complete", f"{desired} workers at revision {revision}")

    ready_count = state.ready if state is not None else 0
    if error is None and rolled_out and state.ready >= desired:
        ready = (True, "AllReplicasReady" if desired else "ScaledToZero",
                 f"{ready_count}/{desired} workers ready at revision {revision}")
    else:
        ready = (False, "ReplicasNotReady" if error is None else error.reason,
                 f"{ready_count}/{desired} workers ready")

    conds = []
    for ctype, (ok, reason, message) in ((CONDITION_READY, ready),
                                         (CONDITION_PROGRESSING, progressing),
                                         (CONDITION_DEGRADED, degraded)):
        conds.append(_condition(ctype, ok, reason, message, generation,
                                prev_conds.get(ctype), now))
    conds += [c for t, c in prev_conds.items() if t not in OWNED_CONDITIONS]

    if degraded[0]:
        phase = "Degraded"
    elif ready[0]:
        phase = "Ready"
    elif state is None:
        phase = "Pending"
    else:
        phase = "Progressing"

    status: dict[str, Any] = {
        "phase": phase,
        "conditions": conds,
        "replicas": state.replicas if state else 0,
        "readyReplicas": ready_count,
        "updatedReplicas": state.updated if state else 0,
        "ready": f"{ready_count}/{desired}",
        "selector": selector_string(name),
    }
    if reconciled:
        status["observedGeneration"] = generation
    if state is not None and state.revision:
        status["stableRevision"] = state.revision
    if error is None and policy is not None:
        status["policy"] = replacing(previous.get("policy"), policy.document())
        status["policyVersion"] = policy.version()
    if spec is not None and spec.rollout.strategy == "RollingUpdate":
        # No canary under a plain rolling update (the canary controller owns these otherwise).
        status.update(canaryRevision=None, canaryWeight=0, currentStep=0)
    return status


def replacing(current: Any, new: Any) -> Any:
    """``new`` as a merge-patch value that replaces ``current`` outright: keys of nested
    objects that ``new`` no longer has are set to None (a merge patch removes them)."""
    if not isinstance(new, Mapping) or not isinstance(current, Mapping):
        return new
    out = {key: replacing(current.get(key), value) for key, value in new.items()}
    out.update({key: None for key in current if key not in new})
    return out


def status_changed(current: Mapping[str, Any] | None, new: Mapping[str, Any]) -> bool:
    """Whether merging ``new`` into ``current`` changes anything (avoids no-op writes)."""
    current = current or {}
    for key, value in new.items():
        if value is None:
            if key in current:
                return True
        elif isinstance(value, Mapping) and isinstance(current.get(key), Mapping):
            # a nested object merges too: its None keys remove fields (status.rollout)
            if status_changed(current[key], value):
                return True
        elif current.get(key) != value:
            return True
    return False


def summarize(statuses: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Count services per phase (for the operator's own gauge)."""
    counts: dict[str, int] = {}
    for status in statuses:
        phase = status.get("phase", "Pending")
        counts[phase] = counts.get(phase, 0) + 1
    return counts
