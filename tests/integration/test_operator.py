"""The operator against the real local control plane, running as its least-privilege
ServiceAccount (deploy/rbac.yaml), never as admin. The test itself plays the user (admin).

Covered: sample -> workers scheduled on fake GPU nodes and Ready -> status Ready; `kubectl
scale` and an HPA through the scale subresource; a policy-only edit changes the ConfigMap and not the
pod template; a model edit rolls the pods; a child deleted behind the operator's back comes
back; a configuration error the API server only catches at apply time becomes Degraded, not a
crash; delete -> children garbage-collected; kill -9 mid-reconcile and restart -> no duplicate
children, status converges."""

from __future__ import annotations

import json
import threading
import time
from pathlib import Path

import pytest
import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from specd.api import k8s
from specd.api.policy import POLICY_KEY, parse_policy
from specd.operator import manifests
from specd_dev.cluster.handle import wait_for
from specd_dev.testing import OperatorProcess, install_crd, operator_kubeconfig

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
READY_TIMEOUT = 90


@pytest.fixture(scope="module")
def op_kubeconfig(cluster, tmp_path_factory) -> Path:
    install_crd(cluster)
    return operator_kubeconfig(cluster, tmp_path_factory.mktemp("operator") / "kubeconfig")


@pytest.fixture
def operator(op_kubeconfig, cluster_namespace, tmp_path):
    proc = OperatorProcess(op_kubeconfig, tmp_path / "operator.log",
                           namespaces=(cluster_namespace,)).start()
    yield proc
    proc.stop()


class Api:
    """The user's view (admin credentials), with a few waits."""

    def __init__(self, cluster, namespace: str) -> None:
        api_client = cluster.api_client()
        self.custom = client.CustomObjectsApi(api_client)
        self.apps = client.AppsV1Api(api_client)
        self.core = client.CoreV1Api(api_client)
        self.ns = namespace

    def create(self, obj: dict) -> dict:
        return self.custom.create_namespaced_custom_object(
            k8s.GROUP, k8s.VERSION, self.ns, k8s.PLURAL, obj)

    def get(self, name: str) -> dict:
        return self.custom.get_namespaced_custom_object(
            k8s.GROUP, k8s.VERSION, self.ns, k8s.PLURAL, name)

    def patch(self, name: str, spec: dict) -> dict:
        return self.custom.patch_namespaced_custom_object(
            k8s.GROUP, k8s.VERSION, self.ns, k8s.PLURAL, name, {"spec": spec})

    def delete(self, name: str) -> None:
        self.custom.delete_namespaced_custom_object(
            k8s.GROUP, k8s.VERSION, self.ns, k8s.PLURAL, name)

    def selector(self, name: str) -> str:
        return f"{k8s.LABEL_SERVICE}={name}"

    def deployments(self, name: str) -> list:
        return self.apps.list_namespaced_deployment(
            self.ns, label_selector=self.selector(name)).items

    def replicasets(self, name: str) -> list:
        return self.apps.list_namespaced_replica_set(
            self.ns, label_selector=self.selector(name)).items

    def configmaps(self, name: str) -> list:
        return self.core.list_namespaced_config_map(
            self.ns, label_selector=self.selector(name)).items

    def services(self, name: str) -> list:
        return self.core.list_namespaced_service(
            self.ns, label_selector=self.selector(name)).items

    def pods(self, name: str) -> list:
        return self.core.list_namespaced_pod(self.ns, label_selector=self.selector(name)).items

    def wait_ready(self, name: str, replicas: int, timeout: float = READY_TIMEOUT) -> dict:
        def ready():
            obj = self.get(name)
            st = obj.get("status") or {}
            return obj if (st.get("phase") == "Ready" and st.get("readyReplicas") == replicas
                           and st.get("observedGeneration") == obj["metadata"]["generation"]
                           ) else None

        try:
            return wait_for(ready, f"{name} Ready with {replicas} workers", timeout=timeout,
                            interval=0.3)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; last: {json.dumps(self.get(name).get('status'))}") \
                from exc


def sample(name: str, gpus: int = 1, **spec) -> dict:
    obj = yaml.safe_load((ROOT / "examples" / "speculativeservice-plain.yaml").read_text())
    obj["metadata"]["name"] = name
    obj["spec"]["worker"]["resources"] = {"limits": {"nvidia.com/gpu": gpus}} if gpus else \
        {"limits": {"cpu": "100m", "memory": "128Mi"}}
    # These tests check the reconcile logic: kwok simulates the workers (the pod runner's
    # tests run real ones, tests/integration/test_pod_runner.py).
    obj["spec"]["worker"]["env"] = [{"name": "LOCAL_POD_RUNNER", "value": "simulate"}]
    obj["spec"].update(spec)
    return obj


def condition(obj: dict, ctype: str) -> dict:
    return next(c for c in obj["status"]["conditions"] if c["type"] == ctype)


def test_operator_identity_is_least_privilege(cluster, op_kubeconfig) -> None:
    def can(*args: str) -> bool:
        out = cluster.kubectl("--kubeconfig", str(op_kubeconfig), "auth", "can-i", *args,
                              check=False)
        return out.stdout.strip() == "yes"

    assert can("patch", "deployments.apps", "-A")
    assert can("patch", f"{k8s.PLURAL}.{k8s.GROUP}", "--subresource=status", "-A")
    assert can("list", "pods", "-A")  # the lossless probes read pods, nothing more
    assert can("patch", "networkpolicies.networking.k8s.io", "-A")  # the workers' own
    assert not can("delete", "networkpolicies.networking.k8s.io", "-A")
    for forbidden in (("get", "secrets", "-A"), ("delete", "deployments.apps", "-A"),
                      ("create", "pods", "-A"), ("patch", "pods", "-A"),
                      ("create", "pods", "--subresource=exec", "-A"),
                      ("get", "pods", "--subresource=log", "-A"), ("*", "*", "-A"),
                      ("update", f"{k8s.PLURAL}.{k8s.GROUP}", "-A")):
        assert not can(*forbidden), forbidden


def test_sample_becomes_ready_on_fake_gpu_nodes(cluster, cluster_namespace, operator) -> None:
    api = Api(cluster, cluster_namespace)
    cluster.kubectl("apply", "-n", cluster_namespace,
                    "-f", str(ROOT / "examples" / "speculativeservice-plain.yaml"))
    name = "smollm2-plain"
    # the sample's worker is a real `specd serve` (the pod runner): it loads the model and
    # profiles its step costs before it is Ready (about a minute on an idle 2-core machine)
    obj = api.wait_ready(name, replicas=1, timeout=300)
    st = obj["status"]
    assert {c["type"]: c["status"] for c in st["conditions"]} == \
        {"Ready": "True", "Progressing": "False", "Degraded": "False"}
    assert st["ready"] == "1/1" and st["policy"]["mode"] == "plain"
    assert st["stableRevision"] and st["selector"] == api.selector(name)

    (dep,) = api.deployments(name)
    (cm,) = api.configmaps(name)
    (svc,) = api.services(name)
    netpol = client.NetworkingV1Api(cluster.api_client()).read_namespaced_network_policy(
        f"{name}-workers", cluster_namespace)
    assert netpol.spec.pod_selector.match_labels == manifests.selector_labels(name)
    assert [(p.port, p.protocol) for p in netpol.spec.ingress[0].ports] == [("http", "TCP")]
    for child in (dep, cm, svc, netpol):
        (ref,) = child.metadata.owner_references
        assert (ref.kind, ref.name, ref.uid, ref.controller) == \
            (k8s.KIND, name, obj["metadata"]["uid"], True)
    assert parse_policy(cm.data[POLICY_KEY]).version() == st["policyVersion"]
    (pod,) = api.pods(name)
    node = api.core.read_node(pod.spec.node_name)
    assert int(node.status.allocatable["nvidia.com/gpu"]) >= 1
    assert pod.spec.containers[0].resources.limits["nvidia.com/gpu"] == "1"
    assert any(c.type == "Ready" and c.status == "True" for c in pod.status.conditions)
    assert pod.metadata.labels[k8s.LABEL_REVISION] == st["stableRevision"]

    table = cluster.kubectl("get", k8s.SHORT_NAME, "-n", cluster_namespace).stdout
    header, row = table.splitlines()[:2]
    assert header.split()[:6] == ["NAME", "PHASE", "READY", "STABLE", "CANARY-WEIGHT",
                                  "ACCEPT-LEN"]
    assert row.split()[:5] == [name, "Ready", "1/1", st["stableRevision"], "0"]

    assert "reconciles" in operator.health()
    metrics = operator.metrics()
    assert 'specd_operator_reconciles_total{result="ok",trigger="create"}' in metrics
    assert 'specd_operator_services{phase="Ready"} 1.0' in metrics


def test_scale_through_the_scale_subresource(cluster, cluster_namespace, operator) -> None:
    api = Api(cluster, cluster_namespace)
    api.create(sample("scaled", gpus=1))
    before = api.wait_ready("scaled", replicas=1)
    cluster.kubectl("scale", f"{k8s.SHORT_NAME}/scaled", "--replicas=3", "-n", cluster_namespace)
    after = api.wait_ready("scaled", replicas=3)
    assert after["spec"]["replicas"] == 3
    assert after["status"]["stableRevision"] == before["status"]["stableRevision"]
    (dep,) = api.deployments("scaled")
    assert dep.spec.replicas == 3
    assert len(api.replicasets("scaled")) == 1  # scaling never rolls
    pods = api.pods("scaled")
    assert len(pods) == 3 and all(p.spec.node_name for p in pods)
    scale = json.loads(cluster.kubectl("get", f"{k8s.SHORT_NAME}/scaled", "-n",
                                       cluster_namespace, "--subresource=scale",
                                       "-o", "json").stdout)
    assert scale["spec"]["replicas"] == 3 and scale["status"]["replicas"] == 3
    assert scale["status"]["selector"] == api.selector("scaled")


def test_hpa_drives_replicas_through_the_scale_subresource(cluster, cluster_namespace,
                                                           operator) -> None:
    api = Api(cluster, cluster_namespace)
    api.create(sample("autoscaled", gpus=0))
    api.wait_ready("autoscaled", replicas=1)
    hpa = {
        "apiVersion": "autoscaling/v2", "kind": "HorizontalPodAutoscaler",
        "metadata": {"name": "autoscaled"},
        "spec": {
            "scaleTargetRef": {"apiVersion": k8s.API_VERSION, "kind": k8s.KIND,
                               "name": "autoscaled"},
            "minReplicas": 2, "maxReplicas": 4,
            "metrics": [{"type": "Resource", "resource": {
                "name": "cpu", "target": {"type": "Utilization", "averageUtilization": 80}}}],
        },
    }
    client.AutoscalingV2Api(api.apps.api_client).create_namespaced_horizontal_pod_autoscaler(
        cluster_namespace, hpa)
    # The HPA controller reads /scale (replicas + selector) and raises replicas to minReplicas.
    obj = api.wait_ready("autoscaled", replicas=2, timeout=60)
    assert obj["spec"]["replicas"] == 2


def test_policy_only_edit_updates_configmap_not_pods(cluster, cluster_namespace,
                                                     operator) -> None:
    api = Api(cluster, cluster_namespace)
    api.create(sample("policy", gpus=0, replicas=2, drafter={"method": "ngram", "k": 4},
                      verification={"mode": "fixed", "fixedLength": 4}))
    before = api.wait_ready("policy", replicas=2)
    (dep_before,) = api.deployments("policy")
    pods_before = sorted(p.metadata.name for p in api.pods("policy"))

    api.patch("policy", {"verification": {"fixedLength": 2, "survivalFloor": 0.3}})
    after = api.wait_ready("policy", replicas=2)
    assert after["status"]["policyVersion"] != before["status"]["policyVersion"]
    (cm,) = api.configmaps("policy")
    policy = parse_policy(cm.data[POLICY_KEY])
    assert (policy.fixed_length, policy.survival_floor) == (2, 0.3)
    assert policy.version() == after["status"]["policyVersion"]

    (dep_after,) = api.deployments("policy")
    assert dep_after.metadata.generation == dep_before.metadata.generation
    assert client.ApiClient().sanitize_for_serialization(dep_after.spec.template) == \
        client.ApiClient().sanitize_for_serialization(dep_before.spec.template)
    assert after["status"]["stableRevision"] == before["status"]["stableRevision"]
    assert sorted(p.metadata.name for p in api.pods("policy")) == pods_before


def test_model_edit_rolls_the_pods(cluster, cluster_namespace, operator) -> None:
    api = Api(cluster, cluster_namespace)
    api.create(sample("rolled", gpus=0, replicas=2))
    before = api.wait_ready("rolled", replicas=2)
    old_pods = {p.metadata.name for p in api.pods("rolled")}
    api.patch("rolled", {"model": {"reference": "HuggingFaceTB/SmolLM2-360M-Instruct"}})

    def rolled():
        obj = api.get("rolled")
        st = obj.get("status") or {}
        pods = api.pods("rolled")
        new = [p for p in pods if p.metadata.labels[k8s.LABEL_REVISION] != before["status"]
               ["stableRevision"] and p.metadata.deletion_timestamp is None]
        done = (st.get("phase") == "Ready" and st.get("observedGeneration") == 2
                and len(pods) == 2 and len(new) == 2)
        return obj if done else None

    after = wait_for(rolled, "pods rolled to the new revision", timeout=READY_TIMEOUT)
    new_rev = after["status"]["stableRevision"]
    assert new_rev != before["status"]["stableRevision"]
    pods = api.pods("rolled")
    assert not old_pods & {p.metadata.name for p in pods}
    args = pods[0].spec.containers[0].args
    assert args[args.index("--model") + 1] == "HuggingFaceTB/SmolLM2-360M-Instruct"
    assert len(api.replicasets("rolled")) == 2  # old one kept (scaled to 0) for history


def test_deleted_child_is_recreated(cluster, cluster_namespace, operator) -> None:
    api = Api(cluster, cluster_namespace)
    api.create(sample("drift", gpus=0))
    api.wait_ready("drift", replicas=1)
    uid = api.deployments("drift")[0].metadata.uid
    api.apps.delete_namespaced_deployment("drift-stable", cluster_namespace)
    wait_for(lambda: [d for d in api.deployments("drift") if d.metadata.uid != uid],
             "the Deployment re-created", timeout=30)
    api.wait_ready("drift", replicas=1)


def test_apply_time_error_degrades_without_crashing(cluster, cluster_namespace,
                                                    operator) -> None:
    api = Api(cluster, cluster_namespace)
    bad = sample("broken", gpus=0)
    # Valid for the CRD, rejected by the API server when the Deployment is applied (an
    # extended resource must be a whole number; the CRD checks only the GPU's).
    bad["spec"]["worker"]["resources"] = {"limits": {"example.com/fpga": "500m"}}
    api.create(bad)

    def degraded():
        obj = api.get("broken")
        st = obj.get("status") or {}
        return obj if st.get("phase") == "Degraded" else None

    obj = wait_for(degraded, "broken Degraded", timeout=30)
    cond = condition(obj, "Degraded")
    assert cond["reason"] == "ApplyRejected"
    assert "Deployment broken-stable" in cond["message"] and "example.com/fpga" in cond["message"]
    assert obj["status"]["observedGeneration"] == 1

    def warning_event():
        events = api.core.list_namespaced_event(cluster_namespace).items
        return [e for e in events if e.type == "Warning" and e.involved_object.name == "broken"
                and e.reason == "ApplyRejected" and "example.com/fpga" in (e.message or "")]

    wait_for(warning_event, "a Warning event on the object", timeout=20)
    assert operator.alive()

    # fixed by the user: the fake nodes have no such resource, so drop it
    api.patch("broken", {"worker": {"resources": {"limits": {"example.com/fpga": None}}}})
    fixed = api.wait_ready("broken", replicas=1)
    assert condition(fixed, "Degraded")["status"] == "False"
    assert operator.alive()


def test_delete_garbage_collects_children(cluster, cluster_namespace, operator) -> None:
    api = Api(cluster, cluster_namespace)
    api.create(sample("doomed", gpus=1, replicas=2))
    api.wait_ready("doomed", replicas=2)
    api.delete("doomed")

    def gone():
        return not (api.deployments("doomed") or api.configmaps("doomed")
                    or api.services("doomed") or api.replicasets("doomed")
                    or api.pods("doomed"))

    wait_for(gone, "children garbage-collected", timeout=60)
    with pytest.raises(ApiException) as info:
        api.get("doomed")
    assert info.value.status == 404


def test_kill_mid_reconcile_then_restart_converges(cluster, cluster_namespace, op_kubeconfig,
                                                   tmp_path) -> None:
    api = Api(cluster, cluster_namespace)
    names = [f"svc-{i:02d}" for i in range(16)]
    proc = OperatorProcess(op_kubeconfig, tmp_path / "operator.log",
                           namespaces=(cluster_namespace,)).start()

    def kill_at_first_child() -> None:
        # SIGKILL as soon as the first child Deployment exists: reconciles are under way.
        wait_for(lambda: api.apps.list_namespaced_deployment(cluster_namespace).items,
                 "a first Deployment", timeout=60, interval=0.01)
        proc.kill()

    killer = threading.Thread(target=kill_at_first_child)
    try:
        killer.start()
        for name in names:
            api.create(sample(name, gpus=0))
        killer.join(timeout=70)
        assert not proc.alive()
        snapshot = {n: ((api.get(n).get("status") or {}).get("observedGeneration"),
                        len(api.deployments(n)), len(api.services(n))) for n in names}
        incomplete = [n for n, (observed, _, _) in snapshot.items() if observed != 1]
        partial = [n for n, (observed, deps, svcs) in snapshot.items()
                   if observed != 1 and (deps or svcs)]
        print(f"at the kill: {len(incomplete)} of {len(names)} not reconciled, "
              f"{len(partial)} with some children but no status")
        assert incomplete, "the kill came too late to interrupt any reconcile"

        proc.start()
        for name in names:
            api.wait_ready(name, replicas=1)
        # Let late events settle, then look for duplicates.
        time.sleep(1.0)
        for name in names:
            uid = api.get(name)["metadata"]["uid"]
            kids = (api.deployments(name), api.configmaps(name), api.services(name))
            assert [len(k) for k in kids] == [1, 1, 1], name
            assert len(api.replicasets(name)) == 1 and len(api.pods(name)) == 1, name
            for kid in (k[0] for k in kids):
                assert [r.uid for r in kid.metadata.owner_references] == [uid]
        assert proc.alive()
        assert 'result="ok"' in proc.metrics()

        # Changes made while the operator is down are picked up when it comes back:
        # an edit (update) and a deleted child of an unchanged object (resume).
        proc.stop()
        api.patch(names[0], {"replicas": 2})
        api.apps.delete_namespaced_deployment(f"{names[1]}-stable", cluster_namespace)
        wait_for(lambda: not api.deployments(names[1]), "the Deployment gone", timeout=30)
        proc.start()
        api.wait_ready(names[0], replicas=2)
        wait_for(lambda: api.deployments(names[1]), "the Deployment re-created on resume",
                 timeout=30)
        api.wait_ready(names[1], replicas=1)
        assert 'trigger="resume"' in proc.metrics()
    finally:
        killer.join(timeout=70)
        proc.stop()
