"""Canary rollouts on the real local cluster, driven by the real operator under its
least-privilege ServiceAccount (workers simulated by kwok: this is about the rollout's steps,
tracks and controls; analysis against real workers comes with the analysis provider).

A pod-changing edit under Canary: the stable Deployment keeps the old revision, a canary
Deployment runs the new one at the step's replica share, a timed pause passes, a pause
without duration waits for a promote, promotion moves the stable track to the new revision
and scales the canary to 0. Abort rolls back (Degraded, RolledBack), retry starts again,
editing the spec back clears the rollout. The controls go through the shared controls
module and through plain `kubectl patch`."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from specd.api import k8s
from specd.operator.rollout import controls
from specd_dev.cluster.handle import wait_for
from specd_dev.testing import operator_for_namespace

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
TIMEOUT = 90


@pytest.fixture(scope="module")
def op(cluster, tmp_path_factory):
    with operator_for_namespace(cluster, tmp_path_factory.mktemp("op"), "canary") as running:
        yield running


class Svc:
    def __init__(self, cluster, namespace: str, name: str) -> None:
        api = cluster.api_client()
        self.custom, self.apps = client.CustomObjectsApi(api), client.AppsV1Api(api)
        self.core = client.CoreV1Api(api)
        self.cluster, self.ns, self.name = cluster, namespace, name

    def get(self) -> dict:
        return self.custom.get_namespaced_custom_object(k8s.GROUP, k8s.VERSION, self.ns,
                                                        k8s.PLURAL, self.name)

    def patch(self, body: dict) -> None:
        self.custom.patch_namespaced_custom_object(k8s.GROUP, k8s.VERSION, self.ns, k8s.PLURAL,
                                                   self.name, body)

    def rollout(self) -> dict:
        return (self.get().get("status") or {}).get("rollout") or {}

    def wait(self, predicate, what: str, timeout: float = TIMEOUT) -> dict:
        def check() -> dict | None:
            obj = self.get()
            return obj if predicate(obj.get("status") or {}) else None

        try:
            return wait_for(check, what, timeout=timeout, interval=0.5)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; status: {json.dumps(self.get().get('status'))}") from exc

    def replicas(self) -> dict[str, tuple[int, str]]:
        """track -> (spec replicas, template revision)."""
        return {d.metadata.labels[k8s.LABEL_TRACK]: (
                    d.spec.replicas, d.spec.template.metadata.labels[k8s.LABEL_REVISION])
                for d in self.apps.list_namespaced_deployment(
                    self.ns, label_selector=f"{k8s.LABEL_SERVICE}={self.name}").items}

    def events(self) -> list[str]:
        return [e.reason for e in self.core.list_namespaced_event(self.ns).items
                if e.involved_object.name == self.name]


def canary_sample(name: str) -> dict:
    obj = yaml.safe_load((ROOT / "examples" / "speculativeservice-plain.yaml").read_text())
    obj["metadata"] = {"name": name}
    spec = obj["spec"]
    spec["replicas"] = 4
    spec["worker"]["resources"] = {"limits": {"cpu": "100m", "memory": "128Mi"}}
    spec["worker"]["env"] = [{"name": "LOCAL_POD_RUNNER", "value": "simulate"}]
    spec["rollout"] = {"strategy": "Canary", "steps": [
        {"weight": 25, "pause": {"duration": "2s"}}, {"weight": 50, "pause": {}},
        {"weight": 75}]}
    return obj


def test_a_canary_walks_its_steps_waits_for_promote_and_is_promoted(cluster, op) -> None:
    namespace, _ = op
    svc = Svc(cluster, namespace, "walk")
    svc.custom.create_namespaced_custom_object(k8s.GROUP, k8s.VERSION, namespace, k8s.PLURAL,
                                               canary_sample("walk"))
    first = svc.wait(lambda s: s.get("phase") == "Ready", "the first revision Ready")
    old = first["status"]["stableRevision"]
    assert "canary" not in svc.replicas()  # a first deployment has nothing to compare with

    svc.patch({"spec": {"engine": {"maxBatch": 8}}})  # a pod-changing edit
    status = svc.wait(lambda s: (s.get("rollout") or {}).get("step") == 1
                      and (s.get("rollout") or {}).get("pauseReason") == "StepPause",
                      "step 2 (50 %) waiting for a promote")["status"]
    new = status["canaryRevision"]
    assert new and new != old and status["stableRevision"] == old
    assert svc.replicas() == {"stable": (2, old), "canary": (2, new)}
    assert status["rollout"]["setWeight"] == 50 and status["canaryWeight"] == 50
    assert status["currentStep"] == 1 and status["phase"] == "Progressing"

    # a stale promote id does nothing; a new one promotes once
    controls.apply(svc.custom, namespace, "walk", "promote", actor="test", request_id="p1")
    svc.wait(lambda s: (s.get("rollout") or {}).get("lastPromoteId") == "p1", "promote p1")
    final = svc.wait(lambda s: s.get("phase") == "Ready" and s.get("stableRevision") == new
                     and (s.get("rollout") or {}).get("phase") == "Healthy",
                     "promotion to the new revision")["status"]
    assert not final.get("canaryRevision") and final["currentStep"] == 0
    assert svc.replicas() == {"stable": (4, new), "canary": (0, new)}
    reasons = svc.events()
    for reason in ("RolloutStarted", "StepCompleted", "StepPromoted", "RolloutCompleted"):
        assert reason in reasons, reasons
    obj = svc.get()
    assert obj["metadata"]["annotations"][controls.ACTOR_ANNOTATION] == "test"


def test_abort_rolls_back_retry_starts_again_and_editing_back_clears(cluster, op) -> None:
    namespace, _ = op
    svc = Svc(cluster, namespace, "abort")
    sample = canary_sample("abort")
    sample["spec"]["rollout"]["steps"] = [{"weight": 50, "pause": {}}, {"weight": 100}]
    svc.custom.create_namespaced_custom_object(k8s.GROUP, k8s.VERSION, namespace, k8s.PLURAL,
                                               sample)
    old = svc.wait(lambda s: s.get("phase") == "Ready", "Ready")["status"]["stableRevision"]
    svc.patch({"spec": {"engine": {"maxBatch": 4}}})
    svc.wait(lambda s: (s.get("rollout") or {}).get("pauseReason") == "StepPause", "paused")

    # abort through plain kubectl, with the very patch the controls module writes
    body = json.dumps(controls.patch("abort", "kubectl-user"))
    cluster.kubectl("patch", k8s.SHORT_NAME, "abort", "-n", namespace, "--type", "merge",
                    "-p", body)
    status = svc.wait(lambda s: (s.get("rollout") or {}).get("phase") == "RolledBack",
                      "rolled back")["status"]
    assert status["phase"] == "Degraded" and status["rollout"]["aborted"] is True
    degraded = next(c for c in status["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "RolledBack" and "aborted by a user" in degraded["message"]
    replicas = svc.replicas()
    assert replicas["stable"] == (4, old) and replicas["canary"][0] == 0
    assert "RolledBack" in svc.events()
    _, operator = op
    assert (f'specd_operator_rollout_phase{{namespace="{namespace}",phase="RolledBack",'
            f'service="abort"}} 1.0') in operator.metrics()

    controls.apply(svc.custom, namespace, "abort", "retry", actor="test", request_id="r1")
    status = svc.wait(lambda s: (s.get("rollout") or {}).get("pauseReason") == "StepPause"
                      and (s.get("rollout") or {}).get("lastRetry") == "r1",
                      "the retried rollout back at its first step")["status"]
    assert status["rollout"]["step"] == 0 and status["rollout"]["aborted"] is False

    svc.patch({"spec": {"engine": {"maxBatch": 16}}})  # back to the stable revision's spec
    status = svc.wait(lambda s: s.get("phase") == "Ready"
                      and (s.get("rollout") or {}).get("phase") == "Healthy"
                      and not s.get("canaryRevision"), "the rollout cleared")["status"]
    assert status["stableRevision"] == old
    assert svc.replicas()["canary"][0] == 0 and "RolloutCleared" in svc.events()


def test_pause_and_resume(cluster, op) -> None:
    namespace, _ = op
    svc = Svc(cluster, namespace, "pause")
    sample = canary_sample("pause")
    sample["spec"]["rollout"]["steps"] = [{"weight": 25, "pause": {"duration": "3s"}},
                                          {"weight": 50}]
    svc.custom.create_namespaced_custom_object(k8s.GROUP, k8s.VERSION, namespace, k8s.PLURAL,
                                               sample)
    svc.wait(lambda s: s.get("phase") == "Ready", "Ready")
    controls.apply(svc.custom, namespace, "pause", "pause", actor="test")
    svc.patch({"spec": {"engine": {"maxBatch": 4}}})
    status = svc.wait(lambda s: (s.get("rollout") or {}).get("pauseReason") == "UserPaused",
                      "held by the user")["status"]
    assert status["rollout"]["step"] == 0
    controls.apply(svc.custom, namespace, "pause", "resume", actor="test")
    svc.wait(lambda s: (s.get("rollout") or {}).get("phase") == "Healthy"
             and s.get("phase") == "Ready", "resumed and promoted")


def test_operator_killed_at_every_point_of_a_canary_resumes_it(cluster, op) -> None:
    """SIGKILL the operator at each stage of a rollout (and around each control) and start it
    again: the rollout ends where an uninterrupted one ends, with no duplicate children."""
    namespace, operator = op
    svc = Svc(cluster, namespace, "killed")
    sample = canary_sample("killed")
    sample["spec"]["rollout"]["steps"] = [{"weight": 25, "pause": {"duration": "3s"}},
                                          {"weight": 50, "pause": {}}, {"weight": 75}]
    svc.custom.create_namespaced_custom_object(k8s.GROUP, k8s.VERSION, namespace, k8s.PLURAL,
                                               sample)
    old = svc.wait(lambda s: s.get("phase") == "Ready", "Ready")["status"]["stableRevision"]
    kills: list[str] = []

    def kill(point: str) -> None:
        operator.kill()
        kills.append(point)
        operator.start()

    def rollout() -> dict:
        return svc.rollout()

    svc.patch({"spec": {"engine": {"maxBatch": 2}}})
    kill("right after the pod-changing edit")
    svc.wait(lambda s: (s.get("rollout") or {}).get("canaryVersion"), "the rollout started")
    kill("after the rollout started (scaling step 1)")
    svc.wait(lambda s: (s.get("rollout") or {}).get("stepStartedAt"), "step 1's pause")
    kill("mid timed pause")
    svc.wait(lambda s: (s.get("rollout") or {}).get("pauseReason") == "StepPause",
             "step 2 waiting for a promote")
    kill("while waiting for a promote")
    controls.apply(svc.custom, namespace, "killed", "abort", actor="test")
    kill("between abort and its effect")
    svc.wait(lambda s: (s.get("rollout") or {}).get("phase") == "RolledBack", "rolled back")
    kill("after the rollback")
    controls.apply(svc.custom, namespace, "killed", "retry", actor="test", request_id="r1")
    kill("between retry and its effect")
    svc.wait(lambda s: (s.get("rollout") or {}).get("lastRetry") == "r1"
             and (s.get("rollout") or {}).get("pauseReason") == "StepPause",
             "the retried rollout at step 2", timeout=120)
    controls.apply(svc.custom, namespace, "killed", "promote", actor="test", request_id="p1")
    kill("between promote and its effect")
    svc.wait(lambda s: (s.get("rollout") or {}).get("phase") in ("Promoting", "Healthy")
             and (s.get("rollout") or {}).get("lastPromoteId") == "p1", "promoting")
    kill("mid promotion")
    final = svc.wait(lambda s: (s.get("rollout") or {}).get("phase") == "Healthy"
                     and s.get("phase") == "Ready" and s.get("stableRevision") != old,
                     "the promoted rollout", timeout=120)["status"]
    kill("after completion")
    assert len(kills) >= 10
    new = final["stableRevision"]
    # a kill between the completing tick's status write and its scale-down leaves the canary
    # up until the restarted operator's first tick: the end state is reached, not instant
    wait_for(lambda: svc.replicas() == {"stable": (4, new), "canary": (0, new)},
             f"stable 4 and canary 0 at {new}", timeout=60, interval=0.5)
    deployments = svc.apps.list_namespaced_deployment(namespace, label_selector=(
        f"{k8s.LABEL_SERVICE}=killed")).items
    configmaps = svc.core.list_namespaced_config_map(namespace, label_selector=(
        f"{k8s.LABEL_SERVICE}=killed")).items
    services = svc.core.list_namespaced_service(namespace, label_selector=(
        f"{k8s.LABEL_SERVICE}=killed")).items
    assert (len(deployments), len(configmaps), len(services)) == (2, 2, 1)
    # Events are posted after the tick's status write, from kopf's in-memory queue: a kill in
    # between loses that tick's Events (the test kills right after seeing each status), but a
    # restarted operator never posts a decision twice -- the ids acted on once each
    reasons = svc.events()
    decisions = ("RolloutStarted", "RolledBack", "RolloutRetried", "StepPromoted",
                 "RolloutCompleted")
    for once in decisions:
        assert reasons.count(once) <= 1, reasons
    # a loss needs a kill inside the few milliseconds before kopf posts: most are posted
    assert sum(reason in reasons for reason in decisions) >= 3, reasons
    assert reasons.count("StepCompleted") >= 1, reasons
    # the history store holds the rollout once and no transition twice, whatever the kills
    # (a kill between a tick's status write and its store write may lose that tick's rows:
    # at most once, never twice)
    from specd.operator.history.store import HistoryStore

    history = HistoryStore(operator.history_url)
    try:
        rows = wait_for(lambda: history.history(namespace, "killed"), "the rollout's rows",
                        timeout=30)
        assert len(rows) == 1, rows  # one rollout, however many operators recorded it
        (row,) = rows
        assert row["canary"] == new and row["stable"] == old
        actions = [e["action"] for e in row["events"]]
        for once in ("RolloutStarted", "RolledBack", "RolloutRetried", "StepPromoted",
                     "RolloutCompleted"):
            assert actions.count(once) <= 1, actions
        assert len(actions) >= 4, actions
        for event in row["events"]:
            if event["action"] in ("StepPromoted", "RolloutRetried"):
                assert event["actor"] == "test"
    finally:
        history.close()
