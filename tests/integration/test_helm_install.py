"""The chart on the local cluster, as a user installs it: `helm install` -> the operator pod
runs for real (the pod runner plays the kubelet: `specd operator` as a process, acting with
the chart's ServiceAccount token) and reconciles a sample to Ready; `helm upgrade` with
changed values (a second watched namespace, another resync) -> a new pod, on the same SQLite
history file (the chart's PersistentVolumeClaim, Bound to a PersistentVolume the test makes,
since the local cluster has no provisioner), reconciles there too; `helm uninstall` -> only the
CRD is left.

The release watches only its own test namespaces (watchNamespaces), so it never races the
operators other test modules start in theirs."""

from __future__ import annotations

import json
import sqlite3
import uuid
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from specd.api import k8s
from specd_dev.cluster.handle import wait_for

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
CHART = ROOT / "helm" / "specd"
CRD = f"{k8s.PLURAL}.{k8s.GROUP}"
# not "specd": other modules apply deploy/rbac.yaml, whose cluster-scoped ClusterRole and
# binding are named specd-operator, as the chart's would be for a release called specd (Helm
# refuses to adopt them, rightly: they are not the release's)
RELEASE = "specd-e2e"
OPERATOR = f"{RELEASE}-operator"
TIMEOUT = 150
HISTORY_CLAIM = f"{OPERATOR}-history"


def sample(name: str) -> dict:
    obj = yaml.safe_load((ROOT / "examples" / "speculativeservice-plain.yaml").read_text())
    obj["metadata"] = {"name": name}
    worker = obj["spec"]["worker"]
    # reconcile logic only: kwok simulates the worker pods, no model loads
    worker["resources"] = {"limits": {"cpu": "100m", "memory": "128Mi"}}
    worker["env"] = [{"name": "LOCAL_POD_RUNNER", "value": "simulate"}]
    return obj


class Release:
    def __init__(self, cluster, namespace: str) -> None:
        self.cluster, self.ns = cluster, namespace
        api_client = cluster.api_client()
        self.core = client.CoreV1Api(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.rbac = client.RbacAuthorizationV1Api(api_client)
        self.custom = client.CustomObjectsApi(api_client)
        self.selector = f"app.kubernetes.io/instance={RELEASE},app.kubernetes.io/component=operator"

    def helm(self, verb: str, *args: str) -> str:
        return self.cluster.helm(verb, RELEASE, *args, "-n", self.ns, timeout=240).stdout

    def operator_pods(self) -> list:
        return [p for p in self.core.list_namespaced_pod(self.ns, label_selector=self.selector)
                .items if p.metadata.deletion_timestamp is None]

    def ready_operator(self, not_uid: str | None = None):
        def ready():
            pods = [p for p in self.operator_pods() if p.metadata.uid != not_uid]
            return pods[0] if len(pods) == 1 and any(
                c.type == "Ready" and c.status == "True"
                for c in pods[0].status.conditions or []) else None

        try:
            return wait_for(ready, "the chart's operator pod Ready", timeout=TIMEOUT, interval=1)
        except TimeoutError as exc:
            logs = [self.cluster.pod_log(self.ns, p.metadata.name)[-3000:]
                    for p in self.operator_pods()]
            raise TimeoutError(f"{exc}; logs: {logs}") from exc

    def reconciled(self, namespace: str, name: str) -> dict:
        self.custom.create_namespaced_custom_object(k8s.GROUP, k8s.VERSION, namespace,
                                                    k8s.PLURAL, sample(name))

        def ready():
            obj = self.custom.get_namespaced_custom_object(k8s.GROUP, k8s.VERSION, namespace,
                                                           k8s.PLURAL, name)
            return obj if (obj.get("status") or {}).get("phase") == "Ready" else None

        return wait_for(ready, f"{namespace}/{name} Ready", timeout=TIMEOUT, interval=0.5)

    def release_objects(self, namespaces: list[str]) -> list[str]:
        """Every object of the release still there, besides the CRD."""
        selector = f"app.kubernetes.io/instance={RELEASE}"
        found = [f"Deployment/{d.metadata.name}" for d in self.apps.list_namespaced_deployment(
            self.ns, label_selector=selector).items]
        found += [f"ServiceAccount/{a.metadata.name}" for a in
                  self.core.list_namespaced_service_account(self.ns, label_selector=selector)
                  .items]
        found += [f"Service/{s.metadata.name}" for s in self.core.list_namespaced_service(
            self.ns, label_selector=selector).items]
        found += [f"PersistentVolumeClaim/{c.metadata.name}" for c in
                  self.core.list_namespaced_persistent_volume_claim(
                      self.ns, label_selector=selector).items]
        found += [f"ClusterRole/{r.metadata.name}" for r in self.rbac.list_cluster_role(
            label_selector=selector).items]
        found += [f"ClusterRoleBinding/{r.metadata.name}" for r in
                  self.rbac.list_cluster_role_binding(label_selector=selector).items]
        for namespace in namespaces:
            found += [f"Role/{namespace}/{r.metadata.name}" for r in
                      self.rbac.list_namespaced_role(namespace, label_selector=selector).items]
            found += [f"RoleBinding/{namespace}/{r.metadata.name}" for r in
                      self.rbac.list_namespaced_role_binding(namespace,
                                                             label_selector=selector).items]
        return found


def adopt_crd(cluster, namespace: str) -> None:
    """Other test modules apply crds/ with kubectl; hand that CRD to the release the way a
    user adopts existing objects into Helm (its ownership label and annotations)."""
    if cluster.kubectl("get", "crd", CRD, check=False).returncode != 0:
        return
    cluster.kubectl("label", "--overwrite", "crd", CRD, "app.kubernetes.io/managed-by=Helm")
    cluster.kubectl("annotate", "--overwrite", "crd", CRD,
                    f"meta.helm.sh/release-name={RELEASE}",
                    f"meta.helm.sh/release-namespace={namespace}")


@pytest.fixture
def namespaces(cluster, tmp_path):
    api = client.CoreV1Api(cluster.api_client())
    names = [f"h-{uuid.uuid4().hex[:8]}" for _ in range(3)]  # release, watched, added later
    for name in names:
        api.create_namespace({"metadata": {"name": name}})
    # what a provisioner would make for the chart's claim (pre-bound to it)
    volume = f"{names[0]}-history"
    api.create_persistent_volume({"metadata": {"name": volume}, "spec": {
        "capacity": {"storage": "1Gi"}, "accessModes": ["ReadWriteOnce"],
        "storageClassName": "", "persistentVolumeReclaimPolicy": "Retain",
        "hostPath": {"path": str(tmp_path / "volume")},
        "claimRef": {"namespace": names[0], "name": HISTORY_CLAIM}}})
    yield names
    cluster.helm("uninstall", RELEASE, "-n", names[0], check=False, timeout=120)
    for name in names:
        api.delete_namespace(name)
    api.delete_persistent_volume(volume)


def test_install_upgrade_uninstall(cluster, namespaces) -> None:
    home, watched, added = namespaces
    release = Release(cluster, home)
    adopt_crd(cluster, home)
    out = release.helm("install", str(CHART), "--set", f"watchNamespaces={{{watched}}}",
                       "--set", "operator.resync=30",
                       "--set", "operator.history.sqlite.persistence.storageClassName=")
    assert "kubectl specd list -n " + watched in out  # NOTES.txt's next commands

    first = release.ready_operator()
    assert first.spec.service_account_name == OPERATOR
    log = cluster.pod_log(home, first.metadata.name)
    assert "--kubeconfig" not in log.split("\n", 1)[0]  # in-cluster: the chart's SA token
    obj = release.reconciled(watched, "first")
    assert obj["status"]["readyReplicas"] == 1
    # the history store is the claim's file, migrated by the operator at start-up
    history = cluster.state_dir / "runner" / "claims" / home / HISTORY_CLAIM / "history.db"
    with sqlite3.connect(history) as db:
        (version,) = db.execute("select version_num from alembic_version").fetchone()
    inode = history.stat().st_ino

    # the chart's RBAC is all it has: it may patch specsvcs where it watches, not elsewhere
    account = f"system:serviceaccount:{home}:{OPERATOR}"
    can = [cluster.kubectl("auth", "can-i", verb, CRD, "-n", ns, f"--as={account}",
                           check=False).stdout.strip()
           for verb, ns in (("patch", watched), ("patch", added), ("delete", watched))]
    assert can == ["yes", "no", "no"]
    assert cluster.kubectl("auth", "can-i", "get", "secrets", "-n", watched,
                           f"--as={account}", check=False).stdout.strip() == "no"

    # upgrade: watch a second namespace, resync more often -> a new pod, Roles there too
    release.helm("upgrade", str(CHART), "--reuse-values",
                 "--set", f"watchNamespaces={{{watched},{added}}}",
                 "--set", "operator.resync=60")
    second = release.ready_operator(not_uid=first.metadata.uid)
    args = second.spec.containers[0].args
    assert f"--namespace={added}" in args and "--resync=60" in args
    release.reconciled(added, "second")
    assert history.stat().st_ino == inode  # the same history file, not a fresh one
    with sqlite3.connect(history) as db:
        assert db.execute("select version_num from alembic_version").fetchone() == (version,)
    assert cluster.kubectl("auth", "can-i", "patch", CRD, "-n", added, f"--as={account}",
                           check=False).stdout.strip() == "yes"

    # uninstall: only the CRD stays (resource-policy keep), and so do the users' objects
    release.helm("uninstall")
    wait_for(lambda: not release.release_objects([watched, added]) and not
             release.operator_pods(), "the release's objects to go", timeout=90, interval=1)
    crd = json.loads(cluster.kubectl("get", "crd", CRD, "-o", "json").stdout)
    assert crd["metadata"]["annotations"]["helm.sh/resource-policy"] == "keep"
    try:
        release.custom.get_namespaced_custom_object(k8s.GROUP, k8s.VERSION, added,
                                                    k8s.PLURAL, "second")
    except ApiException as exc:  # pragma: no cover - the assertion message
        pytest.fail(f"the SpeculativeService went with the release: {exc.status}")
