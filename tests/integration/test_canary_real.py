"""Canary rollouts end to end on real workers: real `specd serve` processes (the pod runner),
real Prometheus scraping them, bounded real traffic through the Service URL (two task
groups), the real operator under its least-privilege ServiceAccount with --prometheus-url.

1. A good canary (a harmless engine change) passes three steps with analysis every 10 s and
   the lossless probes, and is promoted; then, under policyChanges: Canary, a policy that
   makes decoding slower (the classic draft model at fixed K=12, on traffic sampled at
   temperature 2.0) is rolled back to plain
   decoding while the stable track keeps it, and plain -> scheduled verification goes
   through a step and is promoted. No request fails during any of it (every request is
   counted).
2. A canary serving a changed target (a perturbed copy of the model written by the test)
   fails the lossless probes and is rolled back, the status naming the probe and position.
3. No traffic: analysis is Inconclusive and the Pause policy holds the step (never a
   rollback); resumed with traffic while Prometheus is stopped (SIGSTOP): Errors, never a
   rollback, and the operator SIGKILLed mid-analysis and restarted; Prometheus back
   (SIGCONT): the rollout goes on to promotion.
"""

from __future__ import annotations

import time
from pathlib import Path

import pytest

from specd.operator.rollout import controls
from specd_dev.cluster.handle import wait_for
from specd_dev.models import perturbed_copy
from specd_dev.testing import (
    SVC_READY_S,
    Svc,
    Traffic,
    operator_for_namespace,
    prometheus_stopped,
)

pytestmark = pytest.mark.cluster

READY_S = SVC_READY_S
WORKER = {"image": "specd-worker:dev",
          "resources": {"limits": {"cpu": "1", "memory": "3Gi", "nvidia.com/gpu": 1}}}
ENGINE = {"maxBatch": 2, "queueBound": 16, "extraArgs": ["--cost-profile=none"]}
# the rollout service measures its step costs at start-up: scheduled verification prices with
# them (with a flat table its draft gate would see drafting as nearly free)
GOOD_ENGINE = {"maxBatch": 2, "queueBound": 16}


@pytest.fixture(scope="module")
def op(cluster, tmp_path_factory):
    with operator_for_namespace(cluster, tmp_path_factory.mktemp("op"), "real",
                                extra=("--prometheus-url", cluster.prometheus_url)) as running:
        yield running


def rollout(status: dict) -> dict:
    return status.get("rollout") or {}


def analysis(metrics: list[dict], **extra) -> dict:
    return {"interval": "10s", "minSamples": 3, "failureLimit": 0, "inconclusiveLimit": 100,
            "metrics": metrics} | extra


SPEED = {"name": "speed", "metric": "tokensPerSecond", "comparison": "relativeToStable",
         "min": 0.75, "byTaskGroup": True}
ERRORS = {"name": "errors", "metric": "errorRate", "comparison": "absolute", "max": 0.0}


def test_good_canary_then_a_slower_policy_rolled_back_then_scheduled_promoted(
        cluster, op) -> None:
    namespace, _ = op
    svc = Svc(cluster, namespace, "good")
    three_steps = [{"weight": w, "pause": {"duration": "10s"}} for w in (25, 50, 75)]
    # The contrast the policy canary is judged on must hold on any machine, not only where
    # speculation happens to win. How much a verified token costs differs by machine: where
    # the forward pass is compute-bound, plain vs fixed K=3 is a coin toss (0.95-1.2 per
    # group) and the draft model at fixed K=8 on greedy traffic decodes at 0.50-0.51x plain
    # (in-process, batch 2); where it is memory-bound at small batches, verifying is nearly
    # free and that same policy was promoted at 0.92x / 1.03x. What loses everywhere is
    # drafting that costs by its length and is thrown away: twelve tokens drafted one by one
    # for traffic sampled at temperature 2.0 (0.75x its true-plain reference at batch 1 on
    # the memory-bound machine, tau 1.15), so stage 2's traffic is sampled.
    svc.create({"replicas": 1, "model": {"reference": "smollm2-135m", "maxContext": 512},
                "drafter": {"method": "draft-model", "k": 12},
                "verification": {"mode": "plain"},
                "engine": GOOD_ENGINE, "worker": WORKER,
                "rollout": {"strategy": "Canary", "policyChanges": "Canary",
                            "steps": three_steps,
                            # one noisy measurement is tolerated, a second fails the step
                            "analysis": analysis([SPEED, ERRORS], probes={},
                                                 failureLimit=1)}})
    first = svc.wait(lambda s: s.get("phase") == "Ready", "the service Ready")
    url = cluster.service_url(namespace, "good", ready=1)
    timings = {}
    with Traffic(url, concurrency=4, max_tokens=16) as traffic:
        time.sleep(5)
        # 1. a harmless engine change: a new revision, the same outputs
        svc.patch({"spec": {"engine": {**GOOD_ENGINE, "queueBound": 24}}})
        edited = time.monotonic()
        promoted = svc.wait(lambda s: rollout(s).get("phase") == "Healthy"
                            and s.get("stableRevision") not in (None, first["stableRevision"])
                            and s.get("phase") == "Ready", "the good canary promoted",
                            timeout=READY_S + 300)
        timings["edit -> promotion (3 steps, 10 s analysis)"] = time.monotonic() - edited
        assert promoted.get("canaryRevision") is None
        events = svc.core.list_namespaced_event(namespace).items
        reasons = [e.reason for e in events if e.involved_object.name == "good"]
        assert reasons.count("StepCompleted") >= 3 and "RolloutCompleted" in reasons
        wait_for(lambda: svc.tracks() == {"stable": 1}, "only the stable pod", timeout=180)

        # 2. a policy-only change to fixed K=12 (slower per request on sampled traffic)
        #    under policyChanges: Canary -> the canary track tries it, speed fails, rolled
        #    back (one step from here on: rollout settings are not part of the version)
        #    A policy change is held to 0.9x: measured at 0.67-0.82x per window on two
        #    runs, the policy sat too near the 0.75 a new revision is held to, and one run
        #    promoted it (chat 0.70, 0.79, 0.82 with one failure tolerated)
        traffic.temperatures = {"chat": 2.0, "code": 2.0}
        one_step = [{"weight": 50, "pause": {"duration": "10s"}}]
        policy_speed = {**SPEED, "min": 0.9}
        svc.patch({"spec": {"verification": {"mode": "fixed", "fixedLength": 12},
                            "rollout": {"steps": one_step, "analysis": analysis(
                                [policy_speed, ERRORS], probes={}, failureLimit=1)}}})
        canarying = svc.wait(lambda s: rollout(s).get("canaryVersion")
                             and rollout(s).get("step", 0) == 0
                             and s.get("canaryWeight", 0) > 0, "the policy canary serving")
        assert svc.policy_mode("stable") == "plain" and svc.policy_mode("canary") == "fixed"
        assert canarying["canaryRevision"] == canarying["stableRevision"]  # same pods' revision
        rolled = svc.wait(lambda s: rollout(s).get("phase") == "RolledBack",
                          "the slower policy rolled back")
        failed = [a for a in rolled["analysis"] if a["verdict"] == "Failed"]
        assert failed and all(a["metric"] == "tokensPerSecond" for a in failed), failed
        assert all(a["canary"] < a["stable"] for a in failed)
        timings["rolled back on"] = "; ".join(a["message"] for a in failed)
        assert svc.policy_mode("stable") == "plain"  # the stable track never left it
        wait_for(lambda: svc.tracks() == {"stable": 1}, "the canary scaled to 0", timeout=180)
        traffic.temperatures = {}  # greedy again

        # 3. plain -> scheduled verification: through the step and promoted. Scheduled
        #    rounds draft only when the draft gate, pricing with the measured step costs,
        #    finds drafting pays, so this drafter's losing rounds are mostly not run; the
        #    step is judged on what a user would accept for such a change (no group slower
        #    than 0.6x; errors still fail it).
        speed = {**SPEED, "min": 0.6}
        svc.patch({"spec": {"verification": {"mode": "scheduled", "maxVerify": 3},
                            "rollout": {"analysis": analysis([speed, ERRORS], probes={},
                                                             failureLimit=1)}}})
        policy_edit = time.monotonic()
        done = svc.wait(lambda s: rollout(s).get("phase") == "Healthy"
                        and svc.policy_mode("stable") == "scheduled",
                        "the scheduled policy promoted", timeout=READY_S + 300)
        timings["policy edit -> promotion"] = time.monotonic() - policy_edit
        assert done["stableRevision"] == promoted["stableRevision"]  # no pod changed
        assert rollout(done)["stableVersion"].endswith(done["policyVersion"])
        wait_for(lambda: svc.tracks() == {"stable": 1}, "the canary scaled to 0", timeout=180)
        time.sleep(2)
    assert traffic.sent > 0 and traffic.failed == 0, traffic.failures()
    probes = [a for a in promoted["analysis"] if a["metric"] == "losslessProbe"]
    assert probes and probes[0]["verdict"] == "Successful"
    print(f"\n{timings}; {traffic.sent} requests, 0 failed")
    svc.delete()


@pytest.fixture
def host_dir():
    """A folder outside /tmp: a worker pod mounts an emptyDir at /tmp, so a model path there
    would name a folder inside the pod (the local pod runner does as a kubelet would)."""
    import shutil
    import tempfile

    path = Path(tempfile.mkdtemp(prefix="specd-test-", dir="/var/tmp"))
    yield path
    shutil.rmtree(path, ignore_errors=True)


def test_a_changed_target_fails_the_lossless_probes(cluster, op, target, host_dir) -> None:
    namespace, _ = op
    model_dir = perturbed_copy(target, host_dir / "perturbed")
    svc = Svc(cluster, namespace, "target")
    svc.create({"replicas": 1, "model": {"reference": "smollm2-135m", "maxContext": 512},
                "drafter": {"method": "ngram", "k": 3}, "engine": ENGINE, "worker": WORKER,
                "rollout": {"strategy": "Canary",
                            "steps": [{"weight": 50, "pause": {"duration": "5m"}}],
                            "analysis": {"interval": "5s", "probes": {"maxTokens": 24},
                                         "inconclusiveLimit": 100}}})
    svc.wait(lambda s: s.get("phase") == "Ready", "the service Ready")
    svc.patch({"spec": {"model": {"reference": str(model_dir), "maxContext": 512}}})
    rolled = svc.wait(lambda s: rollout(s).get("phase") == "RolledBack",
                      "the changed target rolled back")
    (probe,) = [a for a in rolled["analysis"] if a["metric"] == "losslessProbe"]
    assert probe["verdict"] == "Failed"
    assert "differ at position" in probe["message"] or "greedy choice" in probe["message"]
    degraded = next(c for c in rolled["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "RolledBack" and "lossless" in degraded["message"]
    print(f"\n{probe['message']}")
    svc.delete()


def test_no_data_holds_and_a_stopped_prometheus_never_rolls_back(cluster, op) -> None:
    namespace, operator = op
    svc = Svc(cluster, namespace, "nodata")
    svc.create({"replicas": 1, "model": {"reference": "smollm2-135m", "maxContext": 512},
                "drafter": {"method": "semi-ar", "k": 3}, "engine": ENGINE, "worker": WORKER,
                "rollout": {"strategy": "Canary", "inconclusivePolicy": "Pause",
                            "steps": [{"weight": 50, "pause": {"duration": "20s"}}],
                            "analysis": {**analysis([{**SPEED, "min": 0.5}]),
                                         "interval": "5s", "inconclusiveLimit": 3}}})
    first = svc.wait(lambda s: s.get("phase") == "Ready", "the service Ready")
    svc.patch({"spec": {"engine": {**ENGINE, "queueBound": 20}}})
    # no traffic at all: Inconclusive, never a pass nor a failure; the Pause policy holds
    held = svc.wait(lambda s: rollout(s).get("pauseReason") == "Inconclusive",
                    "the step held for no data")
    assert rollout(held)["phase"] == "Paused" and not rollout(held).get("aborted")
    assert all(a["verdict"] == "Inconclusive" for a in held["analysis"])
    time.sleep(12)  # still held: inconclusive is not a reason to go on or back
    assert rollout(svc.status())["pauseReason"] == "Inconclusive"
    url = cluster.service_url(namespace, "nodata", ready=2)
    # traffic comes back: the user lifts the hold (and tolerates thin windows from here on,
    # so a busy machine's sparse samples do not pause the step again)
    svc.patch({"spec": {"rollout": {"analysis": {"inconclusiveLimit": 100}}}})
    with Traffic(url, concurrency=4, max_tokens=16) as traffic:
        with prometheus_stopped(cluster):
            controls.apply(svc.custom, namespace, "nodata", "resume", actor="test")
            erred = svc.wait(lambda s: rollout(s).get("errorChecks", 0) >= 2,
                             "analysis errors while Prometheus is stopped", timeout=180)
            assert rollout(erred)["phase"] == "Progressing"
            assert any(a["verdict"] == "Error" for a in erred["analysis"])
            # killed mid-analysis (a query hangs on the stopped Prometheus) and restarted:
            # the counts live in .status, the rollout goes on from there
            operator.kill()
            operator.start()
            assert rollout(svc.status()).get("errorChecks", 0) >= 2
        done = svc.wait(lambda s: rollout(s).get("phase") == "Healthy"
                        and s.get("stableRevision") != first["stableRevision"],
                        "promoted once Prometheus is back", timeout=READY_S + 120)
    assert traffic.sent > 0 and traffic.failed == 0, traffic.failures()
    events = [e.reason for e in svc.core.list_namespaced_event(namespace).items
              if e.involved_object.name == "nodata"]
    assert "RolledBack" not in events and "RolloutCompleted" in events
    assert done.get("canaryRevision") is None
    svc.delete()
