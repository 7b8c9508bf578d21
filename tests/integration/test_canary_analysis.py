"""The whole loop on real workers: a canary judged on live Prometheus metrics per task group
and rolled back automatically.

Stable: Scheme B (semi-ar drafter, scheduled verification). Canary: Scheme A at a long fixed
length (parallel drafter, K = 7, every request verifies 7 drafts each round: the forward
grows past the cost staircase's steps while few drafts are accepted), slower per request --
the migration done the wrong way round. Real `specd
serve` processes (the pod runner), real Prometheus scraping them, bounded real traffic through
the Service URL with two task groups, the real operator (least-privilege ServiceAccount) with
`--prometheus-url`. The tokensPerSecond check (relativeToStable, byTaskGroup) fails, the
canary is rolled back, and the status names the metric, the task group and the values; no
request fails during the whole rollout. The lossless probes (the same greedy prompts to a
canary and a stable pod) pass: a changed drafter and verification length keep the target's
outputs."""

from __future__ import annotations

import time

import pytest
from kubernetes import client

from specd.api import k8s
from specd.operator.history.store import HistoryStore
from specd_dev.cluster.handle import wait_for
from specd_dev.testing import Traffic, operator_for_namespace

pytestmark = pytest.mark.cluster

NAME = "judged"
READY_S = 300


def service() -> dict:
    return {"apiVersion": k8s.API_VERSION, "kind": k8s.KIND, "metadata": {"name": NAME},
            "spec": {
                "replicas": 2,
                "model": {"reference": "smollm2-135m", "maxContext": 512},
                "drafter": {"method": "semi-ar", "k": 3},
                "verification": {"mode": "scheduled"},
                "engine": {"maxBatch": 2, "queueBound": 16,
                           "extraArgs": ["--cost-profile=none"]},
                "worker": {"image": "specd-worker:dev", "resources": {
                    "limits": {"cpu": "1", "memory": "3Gi", "nvidia.com/gpu": 1}}},
                "rollout": {
                    "strategy": "Canary",
                    "steps": [{"weight": 50, "pause": {"duration": "10m"}}, {"weight": 100}],
                    "analysis": {"interval": "5s", "minSamples": 4, "failureLimit": 0,
                                 "inconclusiveLimit": 100, "probes": {}, "metrics": [
                                     {"name": "speed", "metric": "tokensPerSecond",
                                      "comparison": "relativeToStable", "min": 0.9,
                                      "byTaskGroup": True}]},
                    "automaticRollback": True}}}


def test_a_slower_canary_is_rolled_back_on_live_metrics(cluster, tmp_path) -> None:
    with operator_for_namespace(cluster, tmp_path, "judged",
                                extra=("--prometheus-url", cluster.prometheus_url)) as (
            namespace, operator):
        rollback_on_live_metrics(cluster, namespace)
        # the history store names the rollback, the failed metric, its group and values
        store = HistoryStore(operator.history_url)
        record = wait_for(lambda: next((r for r in store.rollouts(namespace, NAME,
                                                                  measurements=True)
                                        if r.outcome == "RolledBack"), None),
                          "the RolledBack rollout in the store", timeout=30)
        failed = [m for m in record.measurements if m.verdict == "Failed"]
        assert failed and all(m.metric == "tokensPerSecond" and m.task_group in ("chat", "code")
                              and m.canary < m.stable for m in failed)
        assert any(e.action == "RolledBack" for e in record.events)


def rollback_on_live_metrics(cluster, namespace: str) -> None:
    api = cluster.api_client()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)

    def status() -> dict:
        return custom.get_namespaced_custom_object(k8s.GROUP, k8s.VERSION, namespace,
                                                   k8s.PLURAL, NAME).get("status") or {}

    custom.create_namespaced_custom_object(k8s.GROUP, k8s.VERSION, namespace, k8s.PLURAL,
                                           service())
    wait_for(lambda: status().get("phase") == "Ready", "the Scheme B service Ready",
             timeout=READY_S, interval=1)
    stable_revision = status()["stableRevision"]
    url = cluster.service_url(namespace, NAME, ready=2)
    with Traffic(url, concurrency=4, max_tokens=16) as traffic:
        time.sleep(5)
        custom.patch_namespaced_custom_object(  # the slower revision: Scheme A, K = 7 fixed
            k8s.GROUP, k8s.VERSION, namespace, k8s.PLURAL, NAME,
            {"spec": {"drafter": {"method": "parallel", "k": 7},
                      "verification": {"mode": "fixed", "fixedLength": 7}}})
        started = time.monotonic()
        final = wait_for(lambda: (s := status()) and (s.get("rollout") or {}).get(
            "phase") == "RolledBack" and s, "the automatic rollback",
            timeout=READY_S + 600, interval=1)
        rolled_back_after = time.monotonic() - started
        time.sleep(3)  # traffic keeps flowing, now all on stable
    assert traffic.sent > 0 and traffic.failed == 0, traffic.failures()
    assert final["phase"] == "Degraded"
    degraded = next(c for c in final["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "RolledBack"
    assert "AnalysisFailed" in degraded["message"] and "speed[" in degraded["message"]
    failed = [a for a in final["analysis"] if a["verdict"] == "Failed"]
    assert failed and all(a["metric"] == "tokensPerSecond" for a in failed)
    assert all(a["value"] < 0.9 and a["canary"] < a["stable"] for a in failed)
    speed = [a for a in final["analysis"] if a["metric"] == "tokensPerSecond"]
    assert {a["taskGroup"] for a in speed} <= {"chat", "code"}
    # another drafter and verification length, the same target: the lossless probes pass
    (probe,) = [a for a in final["analysis"] if a["metric"] == "losslessProbe"]
    assert probe["verdict"] == "Successful", probe
    assert final["stableRevision"] == stable_revision

    def tracks() -> set:
        return {p.metadata.labels.get(k8s.LABEL_TRACK)
                for p in core.list_namespaced_pod(namespace).items
                if p.metadata.deletion_timestamp is None}

    wait_for(lambda: tracks() == {"stable"}, "only stable pods left", timeout=90)
    print(f"\nrolled back {rolled_back_after:.0f}s after the edit; {traffic.sent} requests, "
          f"0 failed; {[a['message'] for a in failed]}")
