"""The local control plane is a real Kubernetes: scheduling onto fake GPU nodes, readiness,
garbage collection, CRDs with CEL validation, helm, and a clean start/stop lifecycle."""

from __future__ import annotations

import json
import socket
import subprocess
import uuid
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.rest import ApiException

from specd import SpecdError
from specd.cli import main as specd_main
from specd_dev.cluster import control_plane, processes, versions
from specd_dev.cluster.handle import wait_for

pytestmark = pytest.mark.cluster

CHART = Path(__file__).resolve().parent.parent / "data" / "charts" / "hello"


def gpu_deployment(name: str, replicas: int, gpus: int) -> dict:
    labels = {"app": name}
    return {
        "apiVersion": "apps/v1", "kind": "Deployment",
        "metadata": {"name": name, "labels": labels},
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": labels},
            "template": {
                "metadata": {"labels": labels},
                "spec": {"containers": [{
                    "name": "worker", "image": "registry.invalid/specd/worker:test",
                    "resources": {"limits": {"nvidia.com/gpu": str(gpus)}},
                }]},
            },
        },
    }


def pod_ready(pod) -> bool:
    return any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions or [])


def test_server_reports_pinned_version(cluster):
    info = client.VersionApi(cluster.api_client()).get_code()
    assert info.git_version == versions.KUBERNETES
    out = json.loads(cluster.kubectl("version", "-o", "json").stdout)
    assert out["clientVersion"]["gitVersion"] == versions.KUBERNETES


def test_fake_nodes_advertise_cpu_memory_and_gpus(cluster):
    nodes = client.CoreV1Api(cluster.api_client()).list_node().items
    assert len(nodes) >= 2
    for node in nodes:
        assert node.status.allocatable["nvidia.com/gpu"] == "8"
        assert node.status.allocatable["cpu"] == "32"
        assert node.status.allocatable["memory"] == "256Gi"
        assert any(c.type == "Ready" and c.status == "True" for c in node.status.conditions)


def test_gpu_deployment_gets_replicaset_and_ready_pods_on_gpu_nodes(cluster, cluster_namespace):
    ns, api_client = cluster_namespace, cluster.api_client()
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    apps.create_namespaced_deployment(ns, gpu_deployment("worker", replicas=3, gpus=2))

    deployment = wait_for(
        lambda: (d := apps.read_namespaced_deployment("worker", ns)).status.ready_replicas == 3
        and d, "3 ready replicas", timeout=60)
    replica_sets = apps.list_namespaced_replica_set(ns).items
    assert len(replica_sets) == 1
    assert replica_sets[0].metadata.owner_references[0].uid == deployment.metadata.uid

    pods = core.list_namespaced_pod(ns).items
    gpu_nodes = {n.metadata.name for n in core.list_node().items
                 if int(n.status.allocatable.get("nvidia.com/gpu", "0")) >= 2}
    assert len(pods) == 3
    for pod in pods:
        assert pod.metadata.owner_references[0].uid == replica_sets[0].metadata.uid
        assert pod.spec.node_name in gpu_nodes
        assert pod.status.phase == "Running" and pod_ready(pod)
        assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "2"


def test_scheduler_respects_gpu_capacity(cluster, cluster_namespace):
    ns = cluster_namespace
    core = client.CoreV1Api(cluster.api_client())
    pod = gpu_deployment("too-big", 1, 9)["spec"]["template"]["spec"]
    core.create_namespaced_pod(ns, {"metadata": {"name": "too-big"}, "spec": pod})
    event = wait_for(lambda: [e for e in core.list_namespaced_event(ns).items
                              if e.reason == "FailedScheduling"], "FailedScheduling event")
    assert "Insufficient nvidia.com/gpu" in event[0].message
    assert core.read_namespaced_pod("too-big", ns).spec.node_name is None


def test_deleting_owner_garbage_collects_children(cluster, cluster_namespace):
    ns, api_client = cluster_namespace, cluster.api_client()
    apps, core = client.AppsV1Api(api_client), client.CoreV1Api(api_client)
    apps.create_namespaced_deployment(ns, gpu_deployment("gc", replicas=2, gpus=1))
    wait_for(lambda: apps.read_namespaced_deployment("gc", ns).status.ready_replicas == 2,
             "2 ready replicas", timeout=60)
    assert core.list_namespaced_pod(ns).items

    apps.delete_namespaced_deployment("gc", ns, propagation_policy="Background")
    wait_for(lambda: not apps.list_namespaced_replica_set(ns).items, "ReplicaSet collected",
             timeout=60)
    wait_for(lambda: not core.list_namespaced_pod(ns).items, "pods collected", timeout=60)

    # A plain ownerReference between two objects is honoured too.
    owner = core.create_namespaced_config_map(ns, {"metadata": {"name": "owner"}})
    core.create_namespaced_config_map(ns, {"metadata": {"name": "child", "ownerReferences": [{
        "apiVersion": "v1", "kind": "ConfigMap", "name": "owner", "uid": owner.metadata.uid}]}})
    core.delete_namespaced_config_map("owner", ns)

    def child_gone() -> bool:
        try:
            core.read_namespaced_config_map("child", ns)
        except ApiException as exc:
            return exc.status == 404
        return False

    wait_for(child_gone, "owned ConfigMap collected", timeout=60)


CRD = """
apiVersion: apiextensions.k8s.io/v1
kind: CustomResourceDefinition
metadata:
  name: widgets.test.specd.dev
spec:
  group: test.specd.dev
  scope: Namespaced
  names: {plural: widgets, singular: widget, kind: Widget}
  versions:
    - name: v1
      served: true
      storage: true
      schema:
        openAPIV3Schema:
          type: object
          properties:
            spec:
              type: object
              x-kubernetes-validations:
                - rule: "self.minReplicas <= self.maxReplicas"
                  message: "minReplicas must not exceed maxReplicas"
              properties:
                minReplicas: {type: integer}
                maxReplicas: {type: integer}
"""

WIDGET = """
apiVersion: test.specd.dev/v1
kind: Widget
metadata: {{name: {name}, namespace: {ns}}}
spec: {{minReplicas: {low}, maxReplicas: {high}}}
"""


def test_crd_applied_with_kubectl_is_served_and_cel_rule_rejects_bad_object(
        cluster, cluster_namespace):
    ns = cluster_namespace
    cluster.kubectl("apply", "-f", "-", input=CRD)
    cluster.kubectl("wait", "--for=condition=Established", "crd/widgets.test.specd.dev",
                    "--timeout=30s")

    def apply_widget(name: str, low: int, high: int) -> subprocess.CompletedProcess[str]:
        return cluster.kubectl("apply", "-f", "-", check=False,
                               input=WIDGET.format(name=name, ns=ns, low=low, high=high))

    # Discovery may lag the Established condition for a moment.
    wait_for(lambda: apply_widget("good", 1, 3).returncode == 0, "valid Widget accepted")
    got = json.loads(cluster.kubectl("get", "widget", "good", "-n", ns, "-o", "json").stdout)
    assert got["spec"] == {"minReplicas": 1, "maxReplicas": 3}

    bad = apply_widget("bad", 5, 2)
    assert bad.returncode != 0
    assert "minReplicas must not exceed maxReplicas" in bad.stderr
    missing = cluster.kubectl("get", "widget", "bad", "-n", ns, check=False)
    assert missing.returncode != 0 and "NotFound" in missing.stderr


def test_helm_install_and_uninstall_tiny_chart(cluster, cluster_namespace):
    ns = cluster_namespace
    release = f"r{uuid.uuid4().hex[:6]}"
    cluster.helm("install", release, str(CHART), "-n", ns, "--set", "message=hi from helm",
                 "--wait", "--timeout", "90s")
    core = client.CoreV1Api(cluster.api_client())
    config_map = core.read_namespaced_config_map(f"{release}-hello", ns)
    assert config_map.data == {"message": "hi from helm"}
    listed = json.loads(cluster.helm("list", "-n", ns, "-o", "json").stdout)
    assert [(r["name"], r["status"]) for r in listed] == [(release, "deployed")]
    deployment = client.AppsV1Api(cluster.api_client()).read_namespaced_deployment(
        f"{release}-hello", ns)
    assert deployment.status.ready_replicas == 1

    cluster.helm("uninstall", release, "-n", ns, "--wait", "--timeout", "60s")
    assert json.loads(cluster.helm("list", "-n", ns, "-o", "json").stdout) == []
    with pytest.raises(ApiException) as gone:
        core.read_namespaced_config_map(f"{release}-hello", ns)
    assert gone.value.status == 404


def test_rbac_is_enforced_for_service_accounts(cluster, cluster_namespace):
    ns, api_client = cluster_namespace, cluster.api_client()
    core, rbac = client.CoreV1Api(api_client), client.RbacAuthorizationV1Api(api_client)
    core.create_namespaced_service_account(ns, {"metadata": {"name": "reader"}})
    kubeconfig = cluster.service_account_kubeconfig(ns, "reader")

    def can(verb: str, resource: str) -> bool:
        result = cluster.kubectl("--kubeconfig", str(kubeconfig), verb, resource, "-n", ns,
                                 check=False)
        assert result.returncode == 0 or "Forbidden" in result.stderr, result.stderr
        return result.returncode == 0

    assert not can("get", "pods")
    rbac.create_namespaced_role(ns, {"metadata": {"name": "pod-reader"}, "rules": [
        {"apiGroups": [""], "resources": ["pods"], "verbs": ["get", "list"]}]})
    rbac.create_namespaced_role_binding(ns, {
        "metadata": {"name": "reader-pods"},
        "roleRef": {"apiGroup": "rbac.authorization.k8s.io", "kind": "Role", "name": "pod-reader"},
        "subjects": [{"kind": "ServiceAccount", "name": "reader", "namespace": ns}]})
    wait_for(lambda: can("get", "pods"), "RoleBinding to take effect")
    assert not can("get", "secrets")


def test_cli_status_kubeconfig_and_idempotent_up(cluster, capsys):
    state = ["--state-dir", str(cluster.state_dir), "--name", cluster.name]
    before = control_plane.read_state(cluster.state_dir)
    assert specd_main(["cluster", "status", *state]) == 0
    out = capsys.readouterr().out
    components, _, pods = out.partition("\n\n")  # then the pod runner's processes
    assert all(f"{c}" in components for c in control_plane.COMPONENTS)
    assert "not" not in components
    assert pods.startswith("pod processes (memory budget")

    assert specd_main(["cluster", "kubeconfig", *state]) == 0
    assert capsys.readouterr().out.strip() == str(cluster.kubeconfig)

    assert specd_main(["cluster", "up", *state]) == 0
    assert "already up" in capsys.readouterr().out
    assert control_plane.read_state(cluster.state_dir) == before  # same processes, same ports


@pytest.mark.slow
def test_own_cluster_starts_and_stops_cleanly(tmp_path):
    """A second cluster beside the session one: up, a real specd pod behind a Service, then
    down leaves no process (the runner's pod included) and no port (the Service URL's too)."""
    handle = control_plane.up(tmp_path, name="lifecycle", timeout=180)
    state = control_plane.read_state(tmp_path)
    assert state is not None and len(state.processes) == len(control_plane.COMPONENTS)
    core = client.CoreV1Api(handle.api_client())
    assert core.list_node().items
    core.create_namespaced_pod("default", {
        "metadata": {"name": "worker", "labels": {"app": "w"}},
        "spec": {"automountServiceAccountToken": False, "containers": [{
            "name": "w", "image": "specd-worker:dev", "command": ["specd", "serve"],
            "args": ["--model", "smollm2-135m", "--drafter", "none", "--max-slots", "1",
                     "--max-context", "256", "--cost-profile", "none", "--port", "8000"],
            "ports": [{"name": "http", "containerPort": 8000}]}]}})
    core.create_namespaced_service("default", {
        "metadata": {"name": "w"},
        "spec": {"selector": {"app": "w"}, "ports": [{"name": "http", "port": 80,
                                                       "targetPort": "http"}]}})
    url = handle.service_url("default", "w")
    pod = wait_for(lambda: (handle.runner_state().pod("default", "worker") or {}).get("pid")
                   and handle.runner_state().pod("default", "worker"), "the worker's process")
    assert control_plane.down(tmp_path) is True
    for process in state.processes:
        assert not processes.is_alive(process.pid, process.start_ticks), process.name
    assert not processes.is_alive(pod["pid"], pod["start_ticks"])
    busy = [port for port in [*vars(state.ports).values(), int(url.rsplit(":", 1)[1]),
                              *pod["ports"].values()] if not processes.port_is_free(port)]
    assert busy == []
    assert not (tmp_path / "kubeconfig").exists() and not (tmp_path / "etcd").exists()
    assert control_plane.status(tmp_path) == {}
    assert control_plane.down(tmp_path) is False  # nothing left to stop
    assert specd_main(["cluster", "kubeconfig", "--state-dir", str(tmp_path)]) == 2
    assert specd_main(["cluster", "status", "--state-dir", str(tmp_path)]) == 1


def test_failed_component_is_named_with_its_log(tmp_path):
    """The API server's port is taken: up fails naming kube-apiserver and its log, and the
    etcd it had started is stopped again."""
    ports = control_plane.Ports.pick()
    with socket.socket() as blocker:
        blocker.bind(("127.0.0.1", ports.apiserver))
        blocker.listen()
        with pytest.raises(SpecdError) as failure:
            control_plane.up(tmp_path, name="broken", timeout=60, ports=ports)
    message = str(failure.value)
    assert message.startswith("kube-apiserver ")
    assert str(tmp_path / "logs" / "kube-apiserver.log") in message
    assert control_plane.read_state(tmp_path) is None
    for port in (ports.etcd_client, ports.etcd_peer):
        assert processes.port_is_free(port)
