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
request fails during the whole rollout."""

from __future__ import annotations

import threading
import time

import httpx
import pytest
from kubernetes import client

from specd.api import k8s
from specd.cluster.handle import wait_for
from specd.operator.testing import operator_for_namespace

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
                                 "inconclusiveLimit": 100, "metrics": [
                                     {"name": "speed", "metric": "tokensPerSecond",
                                      "comparison": "relativeToStable", "min": 0.9,
                                      "byTaskGroup": True}]},
                    "automaticRollback": True}}}


class Traffic:
    """A bounded closed loop of chat requests through the Service URL (two task groups)."""

    def __init__(self, url: str, concurrency: int = 2) -> None:
        self.url, self.stop = url, threading.Event()
        self.sent = self.failed = 0
        self.errors: list[str] = []
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.loop, args=(i,), daemon=True)
                        for i in range(concurrency)]

    def loop(self, index: int) -> None:
        with httpx.Client(timeout=120) as http:
            n = 0
            while not self.stop.is_set():
                group = ("chat", "code")[(index + n) % 2]
                prompt = ("Write a short greeting." if group == "chat"
                          else "Write a Python function that adds two numbers.")
                try:
                    response = http.post(f"{self.url}/v1/chat/completions",
                                         headers={"X-Specd-Task-Group": group},
                                         json={"model": "smollm2-135m", "max_tokens": 24,
                                               "temperature": 0,
                                               "messages": [{"role": "user", "content": prompt}]})
                    ok = response.status_code == 200
                    detail = f"{response.status_code} {response.text[:200]}"
                except httpx.HTTPError as exc:
                    ok, detail = False, f"{type(exc).__name__}: {exc}"
                with self.lock:
                    self.sent += 1
                    if not ok:
                        self.failed += 1
                        self.errors.append(detail)
                n += 1

    def __enter__(self) -> Traffic:
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=150)


def test_a_slower_canary_is_rolled_back_on_live_metrics(cluster, tmp_path) -> None:
    with operator_for_namespace(cluster, tmp_path, "judged",
                                extra=("--prometheus-url", cluster.prometheus_url)) as (
            namespace, _):
        rollback_on_live_metrics(cluster, namespace)


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
    with Traffic(url) as traffic:
        time.sleep(5)
        custom.patch_namespaced_custom_object(  # the slower revision: Scheme A, K = 7 fixed
            k8s.GROUP, k8s.VERSION, namespace, k8s.PLURAL, NAME,
            {"spec": {"drafter": {"method": "parallel", "k": 7},
                      "verification": {"mode": "fixed", "fixedLength": 7}}})
        started = time.monotonic()
        final = wait_for(lambda: (s := status()) and (s.get("rollout") or {}).get(
            "phase") == "RolledBack" and s, "the automatic rollback",
            timeout=READY_S + 240, interval=1)
        rolled_back_after = time.monotonic() - started
        time.sleep(3)  # traffic keeps flowing, now all on stable
    assert traffic.sent > 0 and traffic.failed == 0, traffic.errors[:5]
    assert final["phase"] == "Degraded"
    degraded = next(c for c in final["conditions"] if c["type"] == "Degraded")
    assert degraded["reason"] == "RolledBack"
    assert "AnalysisFailed" in degraded["message"] and "speed[" in degraded["message"]
    failed = [a for a in final["analysis"] if a["verdict"] == "Failed"]
    assert failed and all(a["metric"] == "tokensPerSecond" for a in failed)
    assert all(a["value"] < 0.9 and a["canary"] < a["stable"] for a in failed)
    assert {a["taskGroup"] for a in final["analysis"]} <= {"chat", "code"}
    assert final["stableRevision"] == stable_revision

    def tracks() -> set:
        return {p.metadata.labels.get(k8s.LABEL_TRACK)
                for p in core.list_namespaced_pod(namespace).items
                if p.metadata.deletion_timestamp is None}

    wait_for(lambda: tracks() == {"stable"}, "only stable pods left", timeout=90)
    print(f"\nrolled back {rolled_back_after:.0f}s after the edit; {traffic.sent} requests, "
          f"0 failed; {[a['message'] for a in failed]}")
