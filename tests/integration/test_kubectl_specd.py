"""`kubectl specd` through the real kubectl (plugin discovery on PATH) against the local
cluster and the real operator: list, get, status exit codes, every control, history; a user
without patch rights gets "permission denied" (workers simulated by kwok)."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest
import yaml
from kubernetes import client

from specd.api import k8s
from specd_dev.cluster.handle import wait_for
from specd_dev.testing import operator_for_namespace

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]


@pytest.fixture(scope="module")
def env(cluster, tmp_path_factory):
    with operator_for_namespace(cluster, tmp_path_factory.mktemp("op"), "plugin") as running:
        yield running


def specd(cluster, namespace: str, *args: str, kubeconfig: Path | None = None):
    """`kubectl specd ...` as a user runs it: kubectl finds kubectl-specd on PATH."""
    environment = cluster.env
    environment["PATH"] = f"{Path(sys.executable).parent}{os.pathsep}{environment['PATH']}"
    if kubeconfig is not None:
        environment["KUBECONFIG"] = str(kubeconfig)
    import subprocess

    return subprocess.run([str(cluster.bin_dir / "kubectl"), "specd", "-n", namespace, *args],
                          capture_output=True, text=True, env=environment, timeout=120)


def test_the_plugin_drives_a_rollout(cluster, env) -> None:
    namespace, _ = env
    obj = yaml.safe_load((ROOT / "examples" / "speculativeservice-plain.yaml").read_text())
    obj["metadata"] = {"name": "plug"}
    obj["spec"].update(replicas=4)
    obj["spec"]["worker"]["resources"] = {"limits": {"cpu": "100m", "memory": "128Mi"}}
    obj["spec"]["worker"]["env"] = [{"name": "LOCAL_POD_RUNNER", "value": "simulate"}]
    obj["spec"]["rollout"] = {"strategy": "Canary", "steps": [
        {"weight": 25, "pause": {}}, {"weight": 50, "pause": {}}, {"weight": 75, "pause": {}}]}
    custom = client.CustomObjectsApi(cluster.api_client())
    custom.create_namespaced_custom_object(k8s.GROUP, k8s.VERSION, namespace, k8s.PLURAL, obj)

    def rollout() -> dict:
        return (custom.get_namespaced_custom_object(k8s.GROUP, k8s.VERSION, namespace,
                                                    k8s.PLURAL, "plug").get("status") or {})

    wait_for(lambda: rollout().get("phase") == "Ready", "Ready", timeout=90)
    assert specd(cluster, namespace, "status", "plug").returncode == 0
    listed = specd(cluster, namespace, "list")
    assert listed.returncode == 0 and "plug" in listed.stdout and "Ready" in listed.stdout

    custom.patch_namespaced_custom_object(k8s.GROUP, k8s.VERSION, namespace, k8s.PLURAL, "plug",
                                          {"spec": {"engine": {"maxBatch": 4}}})
    wait_for(lambda: (rollout().get("rollout") or {}).get("pauseReason") == "StepPause",
             "step 1 waiting for a promote", timeout=90)
    assert specd(cluster, namespace, "status", "plug").returncode == 3  # progressing
    waited = specd(cluster, namespace, "status", "plug", "--watch", "--timeout", "3s")
    assert waited.returncode == 2 and "timed out" in waited.stdout

    got = specd(cluster, namespace, "get", "plug")
    assert got.returncode == 0 and "->  1     25%" in got.stdout and "StepPause" in got.stdout

    promoted = specd(cluster, namespace, "promote", "plug")
    assert promoted.returncode == 0 and "promoted" in promoted.stdout
    wait_for(lambda: (rollout().get("rollout") or {}).get("step") == 1, "step 2", timeout=60)
    assert specd(cluster, namespace, "pause", "plug").returncode == 0
    wait_for(lambda: (rollout().get("rollout") or {}).get("pauseReason") == "UserPaused",
             "paused by the user", timeout=60)
    assert specd(cluster, namespace, "resume", "plug").returncode == 0
    wait_for(lambda: (rollout().get("rollout") or {}).get("pauseReason") == "StepPause",
             "resumed, back at the step's own pause", timeout=60)
    assert specd(cluster, namespace, "abort", "plug").returncode == 0
    wait_for(lambda: (rollout().get("rollout") or {}).get("phase") == "RolledBack",
             "rolled back", timeout=60)
    degraded = specd(cluster, namespace, "status", "plug")
    assert degraded.returncode == 1 and "aborted by a user" in degraded.stdout
    assert specd(cluster, namespace, "retry", "plug").returncode == 0
    wait_for(lambda: (rollout().get("rollout") or {}).get("step") == 0
             and (rollout().get("rollout") or {}).get("pauseReason") == "StepPause",
             "retried from step 1", timeout=60)
    assert specd(cluster, namespace, "promote", "plug", "--full").returncode == 0
    done = specd(cluster, namespace, "status", "plug", "--watch", "--timeout", "90s")
    assert done.returncode == 0, done.stdout + done.stderr

    history = specd(cluster, namespace, "history", "plug").stdout
    for reason in ("RolloutStarted", "StepPromoted", "RolledBack", "RolloutRetried",
                   "Promoted", "RolloutCompleted"):
        assert reason in history, history
    annotations = custom.get_namespaced_custom_object(
        k8s.GROUP, k8s.VERSION, namespace, k8s.PLURAL, "plug")["metadata"]["annotations"]
    assert annotations["serving.specd.io/last-action-by"].startswith("kubectl-specd/")


def test_a_user_without_patch_rights_is_told_so(cluster, env) -> None:
    namespace, _ = env
    core = client.CoreV1Api(cluster.api_client())
    rbac = client.RbacAuthorizationV1Api(cluster.api_client())
    core.create_namespaced_service_account(namespace, {"metadata": {"name": "viewer"}})
    rbac.create_namespaced_role(namespace, {
        "metadata": {"name": "specsvc-viewer"},
        "rules": [{"apiGroups": [k8s.GROUP], "resources": [k8s.PLURAL],
                   "verbs": ["get", "list", "watch"]}]})
    rbac.create_namespaced_role_binding(namespace, {
        "metadata": {"name": "specsvc-viewer"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role",
                    "name": "specsvc-viewer"},
        "subjects": [{"kind": "ServiceAccount", "name": "viewer", "namespace": namespace}]})
    viewer = cluster.service_account_kubeconfig(namespace, "viewer")
    wait_for(lambda: specd(cluster, namespace, "list", kubeconfig=viewer).returncode == 0,
             "the viewer's rights", timeout=30)
    refused = specd(cluster, namespace, "abort", "plug", kubeconfig=viewer)
    assert refused.returncode == 4 and "permission denied" in refused.stderr
