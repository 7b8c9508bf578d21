"""Pure status computation: conditions, phase, transitions, and what survives a refresh."""

from __future__ import annotations

import pytest

from specd.api import k8s
from specd.api.spec import parse_spec
from specd.operator.manifests import revision
from specd.operator.status import (
    ConfigError,
    carried_error,
    compute_status,
    status_changed,
    track_state,
)

SPEC = parse_spec({"replicas": 2, "model": {"reference": "smollm2-135m"},
                   "drafter": {"method": "ngram", "k": 4},
                   "worker": {"image": "specd-worker:0.1.0"}})
REV = revision(SPEC)
T0, T1 = "2026-01-01T00:00:00Z", "2026-01-01T00:05:00Z"


def deployment(*, rev: str = REV, desired: int = 2, replicas: int = 2, ready: int = 2,
               updated: int = 2, available: int | None = None, generation: int = 3,
               observed: int = 3, conditions: list | None = None) -> dict:
    return {
        "metadata": {"name": "svc-stable", "generation": generation,
                     "labels": {k8s.LABEL_TRACK: "stable"}},
        "spec": {"replicas": desired,
                 "template": {"metadata": {"labels": {k8s.LABEL_REVISION: rev}}}},
        "status": {"replicas": replicas, "readyReplicas": ready, "updatedReplicas": updated,
                   "availableReplicas": ready if available is None else available,
                   "observedGeneration": observed, "conditions": conditions or []},
    }


def status(stable=None, error=None, previous=None, now=T0, reconciled=True, spec=SPEC,
           rev=REV) -> dict:
    return compute_status(name="svc", generation=5, spec=spec, revision=rev,
                          policy=spec.policy() if spec else None, stable=stable, error=error,
                          previous=previous, now=now, reconciled=reconciled)


def conds(st: dict) -> dict[str, tuple[str, str]]:
    return {c["type"]: (c["status"], c["reason"]) for c in st["conditions"]}


@pytest.mark.parametrize("case, stable, phase, ready, progressing, degraded", [
    ("no deployment yet", None, "Pending",
     ("False", "ReplicasNotReady"), ("True", "Creating"), ("False", "AsExpected")),
    ("all ready", deployment(), "Ready",
     ("True", "AllReplicasReady"), ("False", "Complete"), ("False", "AsExpected")),
    ("pods not ready", deployment(ready=1), "Progressing",
     ("False", "ReplicasNotReady"), ("True", "Scaling"), ("False", "AsExpected")),
    ("old revision", deployment(rev="0ld0ld0ld0"), "Progressing",
     ("False", "ReplicasNotReady"), ("True", "RollingUpdate"), ("False", "AsExpected")),
    ("rolling: old pods left", deployment(replicas=3, updated=1), "Progressing",
     ("False", "ReplicasNotReady"), ("True", "RollingUpdate"), ("False", "AsExpected")),
    ("controller has not seen the new generation", deployment(observed=2), "Progressing",
     ("False", "ReplicasNotReady"), ("True", "Scaling"), ("False", "AsExpected")),
    ("scaling up", deployment(desired=1, replicas=1, ready=1, updated=1), "Progressing",
     ("False", "ReplicasNotReady"), ("True", "Scaling"), ("False", "AsExpected")),
    ("progress deadline exceeded", deployment(ready=0, conditions=[
        {"type": "Progressing", "status": "False", "reason": "ProgressDeadlineExceeded",
         "message": "ReplicaSet has timed out progressing."}]), "Degraded",
     ("False", "ReplicasNotReady"), ("True", "Scaling"), ("True", "ProgressDeadlineExceeded")),
    ("replica failure", deployment(replicas=0, ready=0, updated=0, conditions=[
        {"type": "ReplicaFailure", "status": "True", "reason": "FailedCreate",
         "message": "pods is forbidden: exceeded quota"}]), "Degraded",
     ("False", "ReplicasNotReady"), ("True", "Scaling"), ("True", "ReplicaFailure")),
])
def test_conditions_table(case, stable, phase, ready, progressing, degraded) -> None:
    st = status(stable=stable)
    assert st["phase"] == phase, case
    assert conds(st) == {"Ready": ready, "Progressing": progressing, "Degraded": degraded}, case
    assert st["observedGeneration"] == 5
    assert st["selector"] == f"{k8s.LABEL_SERVICE}=svc"


def test_counts_and_display() -> None:
    st = status(stable=deployment(replicas=3, ready=1, updated=2))
    assert (st["replicas"], st["readyReplicas"], st["updatedReplicas"], st["ready"]) == \
        (3, 1, 2, "1/2")
    assert st["stableRevision"] == REV
    assert st["policyVersion"] == SPEC.policy().version()
    assert st["policy"]["mode"] == "fixed" and st["policy"]["k_max"] == 4
    assert (st["canaryRevision"], st["canaryWeight"], st["currentStep"]) == (None, 0, 0)


def test_config_error_degrades_and_keeps_the_old_policy() -> None:
    err = ConfigError("ApplyRejected", "Deployment svc-stable: spec.template...: Invalid value")
    st = status(stable=deployment(rev="0ld0ld0ld0"), error=err)
    assert st["phase"] == "Degraded"
    assert conds(st) == {"Ready": ("False", "ApplyRejected"),
                         "Progressing": ("False", "Blocked"),
                         "Degraded": ("True", "ApplyRejected")}
    degraded = next(c for c in st["conditions"] if c["type"] == "Degraded")
    assert degraded["message"] == err.message
    assert "policy" not in st and "policyVersion" not in st  # merge patch keeps the old ones


def test_unparseable_spec() -> None:
    st = status(spec=None, rev=None, error=ConfigError("InvalidSpec", "spec.model: missing"),
                stable=None)
    assert st["phase"] == "Degraded"
    assert "canaryWeight" not in st


def test_transition_time_moves_only_on_status_change() -> None:
    first = status(stable=deployment(ready=1), now=T0)
    same = status(stable=deployment(ready=1), previous=first, now=T1)
    flipped = status(stable=deployment(), previous=first, now=T1)
    times = {c["type"]: c["lastTransitionTime"] for c in same["conditions"]}
    assert times == {"Ready": T0, "Progressing": T0, "Degraded": T0}
    times = {c["type"]: c["lastTransitionTime"] for c in flipped["conditions"]}
    assert times == {"Ready": T1, "Progressing": T1, "Degraded": T0}
    served = {k: v for k, v in first.items() if v is not None}  # as after the merge patch
    assert not status_changed(served, same)
    assert status_changed(served, flipped)


def test_a_nested_status_object_is_compared_as_merged() -> None:
    """status.rollout carries None for cleared fields; the served object has none of them,
    so an unchanged paused canary must not write its status every tick."""
    from specd.operator.rollout.state import RolloutState, to_status

    rollout = to_status(RolloutState(stable="a", canary="b", phase="Paused"))
    served = {"rollout": {k: v for k, v in rollout.items() if v is not None}, "phase": "Ready"}
    assert not status_changed(served, {"rollout": rollout, "phase": "Ready"})
    assert status_changed(served, {"rollout": {**rollout, "step": 1}})
    assert status_changed(served, {"rollout": {**rollout, "phase": None}})  # a field removed
    assert status_changed({"rollout": "x"}, {"rollout": rollout})


def test_foreign_conditions_are_kept() -> None:
    previous = {"conditions": [{"type": "RolloutHealthy", "status": "True", "reason": "X",
                                "message": "", "lastTransitionTime": T0}]}
    st = status(stable=deployment(), previous=previous)
    assert [c["type"] for c in st["conditions"]] == \
        ["Ready", "Progressing", "Degraded", "RolloutHealthy"]


def test_refresh_keeps_observed_generation_and_config_error() -> None:
    err = ConfigError("Forbidden", "deployments.apps is forbidden")
    reconciled = status(stable=None, error=err)
    assert carried_error(reconciled, 5) == err
    assert carried_error(reconciled, 6) is None  # a newer spec: the next reconcile decides
    refresh = status(stable=deployment(), error=carried_error(reconciled, 5),
                     previous=reconciled, reconciled=False)
    assert "observedGeneration" not in refresh
    assert refresh["phase"] == "Degraded"


def test_scaled_to_zero_is_ready() -> None:
    spec = SPEC.model_copy(update={"replicas": 0})
    st = status(spec=spec, stable=deployment(desired=0, replicas=0, ready=0, updated=0))
    assert st["phase"] == "Ready" and conds(st)["Ready"] == ("True", "ScaledToZero")


def test_status_changed_treats_none_as_delete() -> None:
    assert status_changed({"canaryRevision": "abc"}, {"canaryRevision": None})
    assert not status_changed({}, {"canaryRevision": None})


def test_track_state_of_fresh_deployment() -> None:
    state = track_state({"metadata": {"generation": 1}, "spec": {"replicas": 1}})
    assert state is not None
    assert (state.replicas, state.ready, state.current, state.revision) == (0, 0, False, None)


def test_typed_status_reads_what_the_operator_writes() -> None:
    from specd.api.spec import parse_status

    st = status(stable=deployment())
    typed = parse_status({k: v for k, v in st.items() if v is not None})
    assert typed.phase == "Ready" and typed.ready_replicas == 2
    assert typed.policy == SPEC.policy() and typed.policy_version == SPEC.policy().version()
    assert typed.condition("Ready").status == "True"
    assert parse_status(None).phase is None
