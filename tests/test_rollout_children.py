"""From a canary plan to children and status (pure): the stable track is only scaled while a
rollout runs (its template is the old revision's), the canary is applied from the spec, and
nothing is ever deleted."""

from __future__ import annotations

from pathlib import Path

import yaml

from specd.api import k8s
from specd.api.spec import parse_spec
from specd.operator import manifests
from specd.operator.rollout import children
from specd.operator.rollout.canary import Plan, Seen, Track
from specd.operator.rollout.state import RolloutState

ROOT = Path(__file__).resolve().parents[1]
SAMPLE = yaml.safe_load((ROOT / "examples" / "speculativeservice-scheme-b.yaml").read_text())
OWNER = {**SAMPLE, "metadata": {"name": "svc", "namespace": "ns", "uid": "u-1"}}
SPEC = parse_spec(SAMPLE["spec"])
REV = manifests.revision(SPEC)


def deployment(track: str, revision: str, replicas: int, ready: int) -> dict:
    built = manifests.build_deployment(OWNER, SPEC, track, replicas, revision)
    built["metadata"]["generation"] = 1
    built["status"] = {"observedGeneration": 1, "replicas": replicas, "readyReplicas": ready,
                       "updatedReplicas": replicas, "availableReplicas": ready}
    return built


def test_mid_rollout_the_stable_track_is_scaled_and_the_canary_applied() -> None:
    state = RolloutState(stable="old", canary=REV, step=0, phase="Progressing")
    plan = Plan(Track("old", 3), Track(REV, 1), state, weight=25)
    steps = children.actions(OWNER, SPEC, REV, plan, [deployment("stable", "old", 4, 4)])
    kinds = [(type(s).__name__, getattr(s, "deployment", None) or s.manifest["kind"])
             for s in steps]
    assert kinds == [("Apply", "ConfigMap"), ("Scale", "svc-stable"), ("Apply", "ConfigMap"),
                     ("Apply", "Deployment"), ("Apply", "Service"), ("Apply", "NetworkPolicy")]
    assert steps[1].replicas == 3
    canary = steps[3].manifest
    assert canary["metadata"]["name"] == "svc-canary" and canary["spec"]["replicas"] == 1
    labels = canary["spec"]["template"]["metadata"]["labels"]
    assert labels[k8s.LABEL_TRACK] == "canary" and labels[k8s.LABEL_REVISION] == REV
    volumes = canary["spec"]["template"]["spec"]["volumes"]
    assert volumes[0]["configMap"]["name"] == "svc-canary-policy"


def test_settled_the_stable_track_is_applied_and_a_left_canary_scaled_to_zero() -> None:
    plan = Plan(Track(REV, 4), None, RolloutState(stable=REV, phase="Healthy"))
    existing = [deployment("stable", REV, 4, 4), deployment("canary", REV, 3, 3)]
    steps = children.actions(OWNER, SPEC, REV, plan, existing)
    assert isinstance(steps[1], children.Apply) and steps[1].manifest["spec"]["replicas"] == 4
    assert [s for s in steps if isinstance(s, children.Scale)] == [
        children.Scale("svc-canary", 0)]
    existing[1]["spec"]["replicas"] = 0  # already at zero: nothing to do
    assert not [s for s in children.actions(OWNER, SPEC, REV, plan, existing)
                if isinstance(s, children.Scale)]


def test_seen_counts_ready_replicas_at_each_tracks_revision() -> None:
    observed = children.seen([deployment("stable", "old", 3, 3), deployment("canary", REV, 1, 0)])
    assert observed == Seen("old", 3, REV, 0)
    stale = deployment("canary", REV, 1, 1)
    stale["metadata"]["generation"] = 2  # the controller has not seen the latest spec yet
    assert children.seen([stale]).canary_ready == 0


def test_rollout_status_and_the_rolled_back_condition() -> None:
    state = RolloutState(stable="old", canary=REV, step=1, phase="RolledBack", aborted=True,
                         message="AnalysisFailed: step 2/3 (50%): tokensPerSecond 0.71 < 0.95")
    plan = Plan(Track("old", 4), Track(REV, 0), state, weight=50)
    status = children.rollout_status(plan, Seen("old", 4, REV, 0))
    assert status["canaryRevision"] is None and status["canaryWeight"] == 0
    assert status["rollout"]["setWeight"] == 50 and status["rollout"]["aborted"] is True
    base = {"phase": "Progressing", "conditions": [
        {"type": "Ready", "status": "False"},
        {"type": "Degraded", "status": "False", "reason": "AsExpected", "message": ""}]}
    degraded = children.degrade_if_rolled_back(base, state, "2026-12-01T00:00:00Z")
    assert degraded["phase"] == "Degraded"
    condition = degraded["conditions"][1]
    assert condition["reason"] == "RolledBack" and "tokensPerSecond 0.71" in condition["message"]
    assert children.degrade_if_rolled_back(base, RolloutState(phase="Healthy"), "t") is base


def test_switching_to_canary_keeps_the_running_revision_as_stable() -> None:
    state = children.initial_state({"stableRevision": "running"}, RolloutState())
    assert state.stable == "running"
    kept = RolloutState(stable="a", canary="b")
    assert children.initial_state({"stableRevision": "running"}, kept) is kept


def test_analysis_status_carries_no_nan() -> None:
    """Prometheus answers NaN for 0/0; JSON (and so a status patch) cannot carry it."""
    import json
    import math

    from specd.operator.analysis.judge import Result

    rows = children.analysis_status([Result("tps", "tokensPerSecond", "chat", "Inconclusive",
                                            "no data", canary=math.nan, stable=2.0)], "t")
    assert rows[0]["canary"] is None and rows[0]["stable"] == 2.0
    json.dumps(rows, allow_nan=False)


def test_rollout_gauges_follow_the_phase_and_go_with_the_service() -> None:
    from prometheus_client import generate_latest

    from specd.operator import metrics

    metrics.record_rollout("ns", "gauged", "Paused", 1, 50)
    text = generate_latest(metrics.REGISTRY).decode()
    assert 'specd_operator_rollout_phase{namespace="ns",phase="Paused",service="gauged"} 1.0' \
        in text
    assert 'specd_operator_rollout_phase{namespace="ns",phase="Healthy",service="gauged"} 0.0' \
        in text
    assert 'specd_operator_rollout_set_weight{namespace="ns",service="gauged"} 50.0' in text
    metrics.record_rollout("ns", "gauged", None, 0, 0)
    assert 'service="gauged"' not in generate_latest(metrics.REGISTRY).decode()


# ---- policy canaries (spec.rollout.policyChanges: Canary) -------------------------------

OLD_POLICY = SPEC.policy().model_copy(update={"mode": "fixed", "fixed_length": 2})


def configmap(track: str, policy) -> dict:
    return manifests.build_configmap(OWNER, track, policy)


def test_a_policy_canary_versions_carry_the_policy_the_track_runs() -> None:
    new = children.version(REV, SPEC.policy(), by_policy=True)
    old = children.version(REV, OLD_POLICY, by_policy=True)
    assert new != old and children.revision_of(new) == children.revision_of(old) == REV
    assert children.version(REV, SPEC.policy(), by_policy=False) == REV
    observed = children.seen([deployment("stable", REV, 2, 2), deployment("canary", REV, 1, 1)],
                             [configmap("stable", OLD_POLICY), configmap("canary", SPEC.policy())],
                             by_policy=True)
    assert observed == Seen(old, 2, new, 1)
    # without policy canaries the policy is not part of what a track runs
    assert children.seen([deployment("stable", REV, 2, 2)], [configmap("stable", OLD_POLICY)]
                         ).stable_version == REV


def test_mid_policy_canary_the_stable_configmap_keeps_the_old_policy() -> None:
    new = children.version(REV, SPEC.policy(), by_policy=True)
    old = children.version(REV, OLD_POLICY, by_policy=True)
    plan = Plan(Track(old, 1), Track(new, 1), RolloutState(stable=old, canary=new), weight=50)
    steps = children.actions(OWNER, SPEC, new, plan, [deployment("stable", REV, 2, 2)],
                             by_policy=True)
    applied = [(s.manifest["kind"], s.manifest["metadata"]["name"]) for s in steps
               if isinstance(s, children.Apply)]
    assert ("ConfigMap", "svc-stable-policy") not in applied  # stable keeps the old policy
    assert ("ConfigMap", "svc-canary-policy") in applied
    assert ("Deployment", "svc-stable") in applied  # same revision: re-applied, same template
    canary = next(s.manifest for s in steps if isinstance(s, children.Apply)
                  and s.manifest["metadata"]["name"] == "svc-canary")
    assert canary["spec"]["template"]["metadata"]["labels"][k8s.LABEL_REVISION] == REV
    # promotion: the stable track takes the new version, its ConfigMap the new policy
    promote = Plan(Track(new, 2), Track(new, 1), RolloutState(stable=old, canary=new), 100)
    written = [s.manifest for s in children.actions(OWNER, SPEC, new, promote, [],
                                                    by_policy=True)
               if isinstance(s, children.Apply) and s.manifest["kind"] == "ConfigMap"]
    assert {m["metadata"]["name"] for m in written} == {"svc-stable-policy", "svc-canary-policy"}
    assert all(m["metadata"]["annotations"][manifests.POLICY_VERSION_ANNOTATION]
               == SPEC.policy().version() for m in written)


def test_switching_policy_changes_re_expresses_versions_instead_of_rolling() -> None:
    old = children.version(REV, OLD_POLICY, by_policy=True)
    running = Seen(old, 2)
    # Direct -> Canary: the recorded revision gains the policy the stable track runs
    state = children.initial_state({}, RolloutState(stable=REV, phase="Healthy"), running,
                                   by_policy=True)
    assert state.stable == old
    # from a status that only names the revision (a service switching to Canary)
    assert children.initial_state({"stableRevision": REV}, RolloutState(), running,
                                  by_policy=True).stable == old
    # Canary -> Direct: the policy part is dropped
    back = children.initial_state({}, RolloutState(stable=old, canary=old), Seen(REV, 2),
                                  by_policy=False)
    assert (back.stable, back.canary) == (REV, REV)
    # another revision running: nothing to re-express
    other = children.initial_state({}, RolloutState(stable="other"), running, by_policy=True)
    assert other.stable == "other"
