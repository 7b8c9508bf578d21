"""The pod runner on the real local cluster: specd's pods are real processes, reachable through
their Service's loopback URL (HAProxy) and scraped by the cluster's Prometheus.

One module, tests in order over one SpeculativeService (real `specd serve` workers on the
embedded model, semi-ar drafter, started by the real operator under its least-privilege
ServiceAccount): two workers answer through the Service and appear in Prometheus; scale up,
delete a pod under traffic (no request lost), a policy-only edit hot-reloads the running
processes; SIGKILL -> restart; a failing readiness probe -> NotReady and no traffic; an
operator pod runs in-cluster under its own ServiceAccount; bad input (not a specd entry point, over the process cap, a command
that fails at once)."""

from __future__ import annotations

import os
import signal
import time
import uuid
from pathlib import Path

import httpx
import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from specd.api import k8s
from specd.operator import manifests
from specd_dev.cluster.handle import wait_for
from specd_dev.cluster.processes import is_alive
from specd_dev.cluster.runner import state as runner_state
from specd_dev.testing import Traffic, operator_for_namespace

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
NAME = "runner-b"
# Real workers load the model on a busy 2-core machine: minutes, not seconds.
READY_S = 300
# Small engine (2 slots, 512 tokens) and no start-up cost profiling: these tests are about
# the processes, not the engine's speed.
WORKER_SPEC = {
    "replicas": 2,
    "model": {"reference": "smollm2-135m", "maxContext": 512},
    "drafter": {"method": "semi-ar", "k": 3},
    "verification": {"mode": "scheduled", "survivalFloor": 0.05},
    "engine": {"maxBatch": 2, "queueBound": 16, "extraArgs": ["--cost-profile=none"]},
    "worker": {"image": "specd-worker:dev",
               "resources": {"limits": {"cpu": "1", "memory": "3Gi", "nvidia.com/gpu": 1}}},
}


class Env:
    def __init__(self, cluster, namespace: str) -> None:
        self.cluster = cluster
        self.ns = namespace
        api = cluster.api_client()
        self.core = client.CoreV1Api(api)
        self.apps = client.AppsV1Api(api)
        self.custom = client.CustomObjectsApi(api)

    def pods(self, selector: str = f"{k8s.LABEL_SERVICE}={NAME}", namespace: str | None = None
             ) -> list:
        return [p for p in self.core.list_namespaced_pod(
            namespace or self.ns, label_selector=selector).items
            if p.metadata.deletion_timestamp is None]

    def ready_pods(self, count: int, selector: str = f"{k8s.LABEL_SERVICE}={NAME}") -> list:
        def ready() -> list | None:
            pods = self.pods(selector)
            ok = [p for p in pods if any(c.type == "Ready" and c.status == "True"
                                         for c in p.status.conditions or [])]
            return ok if len(ok) == count == len(pods) else None

        return wait_for(ready, f"{count} Ready pods ({selector})", timeout=READY_S, interval=1)

    def ready_pods_in(self, namespace: str, selector: str) -> bool:
        pods = self.pods(selector, namespace=namespace)
        return bool(pods) and all(any(c.type == "Ready" and c.status == "True"
                                      for c in p.status.conditions or []) for p in pods)

    def process(self, pod: str, namespace: str | None = None) -> dict:
        """The runner's record of a pod's process (pid, ports), once it has one."""
        def found() -> dict | None:
            published = self.cluster.runner_state()
            entry = published.pod(namespace or self.ns, pod) if published else None
            return entry if entry and entry.get("pid") else None

        return wait_for(found, f"a process for pod {pod}", timeout=60)

    def metrics(self, pod: str) -> str:
        port = self.process(pod)["ports"]["8000"]
        return httpx.get(f"http://127.0.0.1:{port}/metrics", timeout=10).text

    def finished_requests(self, pod: str) -> float:
        """The pod's own count of finished requests (every task group)."""
        return sum(float(line.rsplit(" ", 1)[1]) for line in self.metrics(pod).splitlines()
                   if line.startswith("specd_requests_total{") and 'outcome="finished"' in line)

    def events(self, pod: str, reason: str) -> list:
        return [e for e in self.core.list_namespaced_event(self.ns).items
                if e.involved_object.name == pod and e.reason == reason]


def chat(url: str, text: str = "Say hi.", group: str = "chat") -> dict:
    response = httpx.post(f"{url}/v1/chat/completions", timeout=120,
                          headers={"X-Specd-Task-Group": group},
                          json={"model": "smollm2-135m", "max_tokens": 4, "temperature": 0,
                                "messages": [{"role": "user", "content": text}]})
    response.raise_for_status()
    return response.json()


def answers(url: str) -> bool:
    try:
        return httpx.get(url, timeout=5).status_code == 200
    except httpx.HTTPError:
        return False


def prom_query(cluster, query: str) -> list:
    response = httpx.get(f"{cluster.prometheus_url}/api/v1/query", params={"query": query},
                         timeout=10)
    response.raise_for_status()
    return response.json()["data"]["result"]


@pytest.fixture(scope="module")
def env(cluster, tmp_path_factory):
    with operator_for_namespace(cluster, tmp_path_factory.mktemp("op"), "runner") as (
            namespace, _):
        obj = {"apiVersion": k8s.API_VERSION, "kind": k8s.KIND, "metadata": {"name": NAME},
               "spec": WORKER_SPEC}
        client.CustomObjectsApi(cluster.api_client()).create_namespaced_custom_object(
            k8s.GROUP, k8s.VERSION, namespace, k8s.PLURAL, obj)
        yield Env(cluster, namespace)


def test_two_real_workers_answer_through_the_service_and_appear_in_prometheus(env) -> None:
    started = time.monotonic()
    pods = env.ready_pods(2)
    ready_after = time.monotonic() - started
    records = [env.process(p.metadata.name) for p in pods]
    for record in records:
        assert is_alive(record["pid"], record["start_ticks"])
        cmdline = Path(f"/proc/{record['pid']}/cmdline").read_bytes().split(b"\0")
        assert b"serve" in cmdline and b"--drafter" in cmdline, cmdline
    url = env.cluster.service_url(env.ns, NAME, ready=2)
    assert url.startswith("http://127.0.0.1:")
    for index in range(8):
        body = chat(url, f"Count to {index}.", group=("chat", "code")[index % 2])
        assert body["choices"][0]["message"]["content"]
    names = [p.metadata.name for p in pods]
    counts = {name: env.finished_requests(name) for name in names}
    assert all(count >= 1 for count in counts.values()), counts  # both pods served
    assert sum(counts.values()) == 8, counts

    def series() -> list | None:
        result = prom_query(env.cluster, f'sum by (namespace, pod, track, revision) '
                                         f'(specd_requests_total{{namespace="{env.ns}"}})')
        return result if len(result) == 2 else None

    result = wait_for(series, "specd_requests_total for both pods in Prometheus", timeout=30)
    assert {r["metric"]["pod"] for r in result} == set(names)
    for r in result:
        assert r["metric"]["namespace"] == env.ns and r["metric"]["track"] == "stable"
        assert r["metric"]["revision"] == pods[0].metadata.labels[k8s.LABEL_REVISION]
    # the pod's labels arrive as a real cluster's kubernetes_sd relabelling gives them
    labelled = prom_query(env.cluster, f'count by (serving_specd_io_track) '
                                       f'(specd_requests_total{{namespace="{env.ns}"}})')
    assert [r["metric"] for r in labelled] == [{"serving_specd_io_track": "stable"}]
    out = env.cluster.kubectl("get", "pods", "-n", env.ns, "-o", "wide").stdout
    status = _cli(env.cluster, "status")
    for component in ("pod-runner", "proxy", "prometheus"):
        assert f"{component}" in status and "not running" not in status
    for name in names:
        assert name in status
    print(f"\n2 workers Ready {ready_after:.0f}s after the service was created; "
          f"RSS {[runner_state.rss_bytes(r['pid']) // 2**20 for r in records]} MiB\n{out}")


def _cli(cluster, *args: str) -> str:
    import subprocess
    import sys

    result = subprocess.run([sys.executable, "-m", "specd.cli", "cluster", *args,
                             "--state-dir", str(cluster.state_dir), "--name", cluster.name],
                            capture_output=True, text=True, timeout=60)
    assert result.returncode == 0, result.stderr
    return result.stdout


def test_scale_delete_and_a_policy_edit_that_reloads_without_restart(env) -> None:
    env.cluster.kubectl("scale", f"{k8s.SHORT_NAME}/{NAME}", "--replicas=3", "-n", env.ns)
    pods = env.ready_pods(3)
    pids = {p.metadata.name: env.process(p.metadata.name)["pid"] for p in pods}
    assert len(set(pids.values())) == 3

    # a deletion under traffic loses no request: the preStop sleep keeps the pod serving
    # while HAProxy drops it, then SIGTERM drains what it still has
    victim = pods[0].metadata.name
    record = env.process(victim)
    url = env.cluster.service_url(env.ns, NAME, ready=3)
    with Traffic(url, concurrency=2, max_tokens=8) as traffic:
        time.sleep(2)
        deleted = time.monotonic()
        env.core.delete_namespaced_pod(victim, env.ns)
        exited = wait_for(lambda: None if is_alive(record["pid"], record["start_ticks"])
                          else time.monotonic(), f"{victim}'s process to exit", timeout=90)
        wait_for(lambda: victim not in {p.metadata.name for p in env.core.list_namespaced_pod(
            env.ns).items}, f"{victim} removed", timeout=30)
    assert exited - deleted >= manifests.PRESTOP_SLEEP_S  # the hook held SIGTERM back
    assert traffic.sent > 0 and traffic.failed == 0, traffic.failures()
    pods = env.ready_pods(3)
    assert victim not in {p.metadata.name for p in pods}
    pids = {p.metadata.name: env.process(p.metadata.name)["pid"] for p in pods}
    assert record["pid"] not in pids.values()

    env.cluster.kubectl("scale", f"{k8s.SHORT_NAME}/{NAME}", "--replicas=2", "-n", env.ns)
    pods = env.ready_pods(2)
    pids = {p.metadata.name: env.process(p.metadata.name)["pid"] for p in pods}
    env.custom.patch_namespaced_custom_object(
        k8s.GROUP, k8s.VERSION, env.ns, k8s.PLURAL, NAME,
        {"spec": {"verification": {"survivalFloor": 0.2}}})

    def new_version() -> str | None:
        cm = env.core.read_namespaced_config_map(f"{NAME}-stable-policy", env.ns)
        version = cm.metadata.annotations.get(f"{k8s.GROUP}/policy-version")
        return version if '"survival_floor": 0.2' in cm.data["policy.json"] else None

    version = wait_for(new_version, "the policy ConfigMap to change", timeout=30)
    for name in pids:
        wait_for(lambda name=name: f'policy_version="{version}"' in env.metrics(name),
                 f"{name} to report policy {version}", timeout=30)
    assert {p.metadata.name: env.process(p.metadata.name)["pid"]
            for p in env.pods()} == pids  # the same processes: hot reload, no restart


def test_sigkill_restarts_the_process_and_the_pod_becomes_ready_again(env) -> None:
    pod = env.ready_pods(2)[0].metadata.name
    record = env.process(pod)
    os.kill(record["pid"], signal.SIGKILL)

    def restarted() -> bool:
        p = env.core.read_namespaced_pod(pod, env.ns)
        statuses = p.status.container_statuses or []
        return bool(statuses and statuses[0].restart_count >= 1
                    and statuses[0].last_state.terminated is not None)

    wait_for(restarted, f"{pod} to show a restart", timeout=30)
    terminated = env.core.read_namespaced_pod(pod, env.ns).status.container_statuses[0] \
        .last_state.terminated
    assert terminated.exit_code == 137 and terminated.reason == "Error"
    env.ready_pods(2)
    assert env.process(pod)["pid"] != record["pid"]


def test_failing_readiness_keeps_a_pod_out_of_the_service(env) -> None:
    """A worker that runs and answers /healthz but whose readiness probe fails: NotReady,
    and no request through the Service URL reaches it."""
    pods = env.ready_pods(2)
    template = pods[0]
    api_client = env.cluster.api_client()
    bad = api_client.sanitize_for_serialization(template)
    spec = bad["spec"]
    spec.pop("nodeName", None)
    spec["containers"][0]["readinessProbe"] = {
        "httpGet": {"path": "/no-such-path", "port": "http"}, "periodSeconds": 1,
        "failureThreshold": 1}
    # the Service's labels, but not the ReplicaSet's pod-template-hash (it would adopt it)
    labels = {k: v for k, v in template.metadata.labels.items() if k != "pod-template-hash"}
    bad = {"apiVersion": "v1", "kind": "Pod",
           "metadata": {"name": "never-ready", "labels": labels,
                        "annotations": template.metadata.annotations},
           "spec": spec}
    env.core.create_namespaced_pod(env.ns, bad)
    try:
        record = env.process("never-ready")
        port = record["ports"]["8000"]
        wait_for(lambda: answers(f"http://127.0.0.1:{port}/readyz"),
                 "the never-ready worker to load its model", timeout=READY_S,
                 interval=1)  # the process itself is fine ...
        time.sleep(3)  # ... several probe periods
        pod = env.core.read_namespaced_pod("never-ready", env.ns)
        assert {c.type: c.status for c in pod.status.conditions}["Ready"] == "False"
        url = env.cluster.service_url(env.ns, NAME, ready=2)
        for index in range(6):
            chat(url, f"Name a colour ({index}).")
        assert env.finished_requests("never-ready") == 0
    finally:
        env.core.delete_namespaced_pod("never-ready", env.ns)


def test_an_operator_pod_reconciles_under_its_own_service_account(env) -> None:
    """The in-cluster identity path the chart will use: a Deployment running `specd
    operator` as the specd-operator ServiceAccount (deploy/rbac.yaml)."""
    watched = f"{env.ns}-op"
    env.core.create_namespace({"metadata": {"name": watched}})
    name = f"op-{uuid.uuid4().hex[:6]}"
    deployment = {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "namespace": "specd-system"},
        "spec": {"replicas": 1, "selector": {"matchLabels": {"app": name}},
                 "template": {"metadata": {"labels": {"app": name}}, "spec": {
                     "serviceAccountName": "specd-operator",
                     "containers": [{
                         "name": "operator", "image": "specd-operator:dev",
                         "command": ["specd", "operator"],
                         "args": ["--namespace", watched, "--bind", "0.0.0.0",
                                  "--health-port", "8080", "--metrics-port", "9090"],
                         "ports": [{"name": "health", "containerPort": 8080},
                                   {"name": "metrics", "containerPort": 9090}],
                         "readinessProbe": {"httpGet": {"path": "/healthz", "port": "health"},
                                            "periodSeconds": 1},
                         "resources": {"limits": {"cpu": "500m", "memory": "512Mi"}}}]}}},
    }
    env.apps.create_namespaced_deployment("specd-system", deployment)
    try:
        wait_for(lambda: env.ready_pods_in("specd-system", f"app={name}"),
                 "the operator pod Ready", timeout=120, interval=1)
        sample = yaml.safe_load((ROOT / "examples" / "speculativeservice-plain.yaml").read_text())
        sample["metadata"] = {"name": "reconciled"}
        sample["spec"]["worker"]["env"] = [{"name": "LOCAL_POD_RUNNER", "value": "simulate"}]
        env.custom.create_namespaced_custom_object(k8s.GROUP, k8s.VERSION, watched,
                                                   k8s.PLURAL, sample)

        def ready() -> bool:
            obj = env.custom.get_namespaced_custom_object(k8s.GROUP, k8s.VERSION, watched,
                                                          k8s.PLURAL, "reconciled")
            return (obj.get("status") or {}).get("phase") == "Ready"

        wait_for(ready, "the in-cluster operator to reconcile the sample", timeout=120)
        (pod,) = env.pods(f"app={name}", namespace="specd-system")
        log = env.cluster.pod_log("specd-system", pod.metadata.name)
        assert "kubeconfig" not in log.split("\n", 1)[0]  # in-cluster, not a kubeconfig flag
    finally:
        # in the foreground, and waited for: a pod the garbage collector deletes later would
        # free its process slot under a later test's feet (the watched namespace's worker
        # pods are kwok's: no process)
        env.apps.delete_namespaced_deployment(name, "specd-system",
                                              propagation_policy="Foreground")
        env.core.delete_namespace(watched)
        wait_for(lambda: not env.pods(f"app={name}", namespace="specd-system"),
                 "the operator pod to be gone", timeout=120, interval=1)


def _bare_pod(name: str, command: list[str], args: list[str]) -> dict:
    return {"apiVersion": "v1", "kind": "Pod", "metadata": {"name": name},
            "spec": {"automountServiceAccountToken": False, "containers": [{
                "name": "c", "image": "specd-worker:dev", "command": command, "args": args,
                "resources": {"limits": {"cpu": "1"}}}]}}


def test_bad_input(env) -> None:
    # not a specd entry point: kwok's, Ready without any process
    env.core.create_namespaced_pod(env.ns, _bare_pod("plain-image", ["sleep"], ["1d"]))
    wait_for(lambda: any(c.type == "Ready" and c.status == "True" for c in (
        env.core.read_namespaced_pod("plain-image", env.ns).status.conditions or [])),
        "kwok to mark the non-specd pod Ready", timeout=30)
    assert env.cluster.runner_state().pod(env.ns, "plain-image") is None

    # a command that fails at once: CrashLoopBackOff, its log one command away
    env.core.create_namespaced_pod(env.ns, _bare_pod(
        "crashes", ["specd", "serve"], ["--model", "no-such-model", "--drafter", "none",
                                        "--policy-file", "/nonexistent/policy.json"]))

    def backing_off() -> bool:
        statuses = env.core.read_namespaced_pod("crashes", env.ns).status.container_statuses
        waiting = statuses[0].state.waiting if statuses else None
        return bool(waiting and waiting.reason == "CrashLoopBackOff"
                    and statuses[0].restart_count >= 2)

    wait_for(backing_off, "the failing pod to reach CrashLoopBackOff", timeout=90)
    assert "/nonexistent/policy.json" in _cli(env.cluster, "logs", "crashes", "-n", env.ns)
    assert env.events("crashes", "BackOff")

    # over the process cap: not Ready, an Event saying why (counted once the pods deleted by
    # earlier tests have ended: one still in its preStop sleep would free its slot later)
    def settled() -> tuple[int] | None:
        # a terminating namespace's pods are deleted later, each freeing a slot
        ending = {n.metadata.name for n in env.core.list_namespace().items
                  if n.status.phase == "Terminating"}
        live = {(p.metadata.namespace, p.metadata.name)
                for p in env.core.list_pod_for_all_namespaces().items
                if p.metadata.deletion_timestamp is None and p.metadata.namespace not in ending}
        admitted = [p for p in env.cluster.runner_state().pods if p.get("admitted")]
        ended = all((p["namespace"], p["pod"]) in live for p in admitted)
        return (len(admitted),) if ended else None

    (running,) = wait_for(settled, "the deleted pods' processes to end", timeout=120)
    runner_state.set_max_processes(env.cluster.state_dir, running)
    try:
        env.core.create_namespaced_pod(env.ns, _bare_pod(
            "over-cap", ["specd", "serve"], ["--model", "smollm2-135m"]))
        wait_for(lambda: env.events("over-cap", "ProcessCapReached"),
                 "a ProcessCapReached event", timeout=30)
        def ready_condition():  # the Event can land before the status patch
            pod = env.core.read_namespaced_pod("over-cap", env.ns)
            return {c.type: c for c in pod.status.conditions or []}.get("Ready")

        ready = wait_for(lambda: (c := ready_condition()) and c.reason == "ProcessCapReached"
                         and c, "the pod's Ready condition to say why", timeout=30)
        assert ready.status == "False" and ready.reason == "ProcessCapReached"
        assert "at most" in ready.message
        entry = wait_for(lambda: env.cluster.runner_state().pod(env.ns, "over-cap"),
                         "the runner to publish the waiting pod")
        assert entry["pid"] is None and entry["waiting"] == "ProcessCapReached"
    finally:
        runner_state.set_max_processes(env.cluster.state_dir, None)
        for name in ("plain-image", "crashes", "over-cap"):
            try:
                env.core.delete_namespaced_pod(name, env.ns)
            except ApiException as exc:
                if exc.status != 404:
                    raise
