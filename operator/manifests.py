"""Pure builders for a SpeculativeService's children (no API calls, no clock, no randomness).

Children, all owned by the SpeculativeService (garbage-collected with it), deterministic names:

- ``<name>-<track>``          Deployment of worker pods for the track (stable, canary)
- ``<name>-<track>-policy``   ConfigMap with the track's verification policy (policy.json)
- ``<name>``                  Service selecting the workers of both tracks
- ``<name>-workers``          NetworkPolicy: ingress to the workers on their serving port only

The revision (a hash of everything that changes the worker pod) is a label on the pod
template, so a pod-changing edit rolls the Deployment; the policy lives only in the
ConfigMap, so a policy-only edit leaves the pod template alone and the workers hot-reload.
"""

from __future__ import annotations

import hashlib
import json
from collections.abc import Mapping
from typing import Any

from specd.api import k8s
from specd.api.policy import POLICY_KEY, Policy
from specd.api.spec import GPU_RESOURCE, ServiceSpec

FIELD_MANAGER = "specd-operator"
CONTAINER = "worker"
HTTP_PORT = 8000
SERVICE_PORT = 80
POLICY_VOLUME = "policy"
POLICY_VERSION_ANNOTATION = f"{k8s.GROUP}/policy-version"
# Non-root identity of the worker process (the worker image creates this user).
WORKER_UID = 10001
# The container command, set explicitly (not left to the image's ENTRYPOINT) so that anything
# reading the pod from the API -- the local pod runner, a policy engine -- sees what runs.
WORKER_COMMAND = ["/usr/bin/tini", "--", "specd", "serve"]
# A deleted worker keeps serving this long (preStop sleep) while its endpoint is removed
# everywhere, then has DRAIN_S for in-flight generations (the worker's own --grace-period
# is shorter, so it exits before the kubelet's SIGKILL).
PRESTOP_SLEEP_S = 5
DRAIN_S = 60

Manifest = dict[str, Any]


# ---- names and labels -------------------------------------------------------------------

def deployment_name(service: str, track: str) -> str:
    return f"{service}-{track}"


def configmap_name(service: str, track: str) -> str:
    return f"{service}-{track}-policy"


def service_name(service: str) -> str:
    return service


def base_labels(service: str) -> dict[str, str]:
    return {
        k8s.LABEL_NAME: "specd-worker",
        k8s.LABEL_INSTANCE: service,
        k8s.LABEL_MANAGED_BY: k8s.MANAGED_BY,
        k8s.LABEL_SERVICE: service,
    }


def track_labels(service: str, track: str) -> dict[str, str]:
    return {**base_labels(service), k8s.LABEL_TRACK: track}


def selector_labels(service: str, track: str | None = None) -> dict[str, str]:
    """The immutable Deployment selector (never the revision) or the Service's (no track)."""
    labels = {k8s.LABEL_SERVICE: service}
    if track is not None:
        labels[k8s.LABEL_TRACK] = track
    return labels


def selector_string(service: str) -> str:
    """The scale subresource's selector: every worker pod of the service, both tracks."""
    return ",".join(f"{k}={v}" for k, v in sorted(selector_labels(service).items()))


# ---- revision and policy ----------------------------------------------------------------

def _canonical(value: Any) -> str:
    return json.dumps(value, sort_keys=True, separators=(",", ":"))


def revision(spec: ServiceSpec) -> str:
    """Hash of everything in the spec that changes the worker pod (10 hex digits)."""
    return hashlib.sha256(_canonical(spec.pod_fields()).encode()).hexdigest()[:10]


def policy_document(policy: Policy) -> str:
    """The policy JSON as stored in the ConfigMap: sorted keys, indented, reviewable."""
    return json.dumps(policy.document(), indent=2, sort_keys=True) + "\n"


# ---- ownership --------------------------------------------------------------------------

def owner_reference(owner: Mapping[str, Any]) -> dict[str, Any]:
    meta = owner["metadata"]
    return {
        "apiVersion": k8s.API_VERSION,
        "kind": k8s.KIND,
        "name": meta["name"],
        "uid": meta["uid"],
        "controller": True,
        "blockOwnerDeletion": True,
    }


def _metadata(owner: Mapping[str, Any], name: str, labels: dict[str, str],
              annotations: dict[str, str] | None = None) -> dict[str, Any]:
    meta: dict[str, Any] = {
        "name": name,
        "namespace": owner["metadata"]["namespace"],
        "labels": labels,
        "ownerReferences": [owner_reference(owner)],
    }
    if annotations:
        meta["annotations"] = annotations
    return meta


# ---- children ---------------------------------------------------------------------------

def build_configmap(owner: Mapping[str, Any], track: str, policy: Policy) -> Manifest:
    service = owner["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": _metadata(owner, configmap_name(service, track),
                              track_labels(service, track),
                              {POLICY_VERSION_ANNOTATION: policy.version()}),
        "data": {POLICY_KEY: policy_document(policy)},
    }


def build_service(owner: Mapping[str, Any]) -> Manifest:
    service = owner["metadata"]["name"]
    return {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": _metadata(owner, service_name(service), base_labels(service)),
        "spec": {
            "type": "ClusterIP",
            "selector": selector_labels(service),
            "ports": [{"name": "http", "port": SERVICE_PORT, "targetPort": "http",
                       "protocol": "TCP"}],
        },
    }


def network_policy_name(service: str) -> str:
    return f"{service}-workers"


def build_network_policy(owner: Mapping[str, Any], spec: ServiceSpec,
                         operator_namespace: str | None = None) -> Manifest:
    """Ingress to the workers of both tracks on the serving port only (the API, /metrics
    and the probes share it), from ``spec.network.allowFrom``, or from anywhere when that is
    empty. With peers set, the operator's own namespace is added (its lossless probes call
    the pods directly). Egress is left alone: workers call nothing but DNS."""
    service = owner["metadata"]["name"]
    rule: dict[str, Any] = {"ports": [{"port": "http", "protocol": "TCP"}]}
    peers = [p.model_dump(mode="json", by_alias=True, exclude_none=True)
             for p in spec.network.allow_from]
    if peers:
        if operator_namespace:
            peers.append({"namespaceSelector": {"matchLabels": {
                "kubernetes.io/metadata.name": operator_namespace}}})
        rule["from"] = peers
    return {
        "apiVersion": "networking.k8s.io/v1",
        "kind": "NetworkPolicy",
        "metadata": _metadata(owner, network_policy_name(service), base_labels(service)),
        "spec": {"podSelector": {"matchLabels": selector_labels(service)},
                 "policyTypes": ["Ingress"], "ingress": [rule]},
    }


def worker_args(spec: ServiceSpec) -> list[str]:
    """Flags after ``WORKER_COMMAND`` (``tini -- specd serve``): the contract with the
    worker server. K travels in the policy document (k_max), the track and revision in env."""
    model, drafter, engine = spec.model, spec.drafter, spec.engine
    args = ["--model", model.reference, "--dtype", model.dtype,
            "--max-context", str(model.max_context), "--drafter", drafter.method]
    if drafter.artifact:
        args += ["--drafter-path", drafter.artifact]
    if drafter.prompt_lookup:
        args.append("--prompt-lookup")
    args += ["--max-slots", str(engine.max_batch),
             "--max-queue", str(engine.queue_bound),
             "--policy-file", f"{k8s.POLICY_MOUNT_DIR}/{POLICY_KEY}",
             "--host", "0.0.0.0", "--port", str(HTTP_PORT)]
    return args + list(engine.extra_args)


def _env(service: str, track: str, rev: str, spec: ServiceSpec) -> list[dict[str, str]]:
    env = [
        {"name": "SPECD_SERVICE", "value": service},
        {"name": "SPECD_TRACK", "value": track},
        {"name": "SPECD_REVISION", "value": rev},
    ]
    if spec.model.revision:
        env.append({"name": "SPECD_MODEL_REVISION", "value": spec.model.revision})
    user = {e.name: e.value or "" for e in spec.worker.env}
    # The root filesystem is read-only; caches go to the /tmp emptyDir unless the user says.
    user.setdefault("HOME", "/tmp")
    res = spec.worker.resources
    threads = cpu_threads(res.limits.get("cpu") or res.requests.get("cpu"))
    if threads is not None:
        # torch would otherwise start one thread per node core, far past the pod's CPU share
        user.setdefault("OMP_NUM_THREADS", str(threads))
    return env + [{"name": k, "value": v} for k, v in user.items()]


def cpu_threads(quantity: object) -> int | None:
    """Whole CPUs in a Kubernetes CPU quantity ("4", "2500m", 0.5): at least 1; None if unset
    or unreadable (then torch's own default applies)."""
    if quantity is None:
        return None
    text = str(quantity).strip()
    try:
        cores = int(text[:-1]) / 1000 if text.endswith("m") else float(text)
    except ValueError:
        return None
    return max(1, int(cores)) if cores > 0 else None


def _gpus(spec: ServiceSpec) -> int:
    value = spec.worker.resources.limits.get(GPU_RESOURCE, 0)
    try:
        return int(str(value))
    except ValueError:
        return 0


def _tolerations(spec: ServiceSpec) -> list[dict[str, Any]]:
    tolerations = [t.model_dump(mode="json", by_alias=True, exclude_none=True)
                   for t in spec.worker.tolerations]
    if _gpus(spec) > 0 and not any(t.get("key") == GPU_RESOURCE for t in tolerations):
        # GPU nodes are commonly tainted nvidia.com/gpu:NoSchedule; GPU workers belong there.
        tolerations.append({"key": GPU_RESOURCE, "operator": "Exists", "effect": "NoSchedule"})
    return tolerations


def _probe(path: str, period: int, failures: int, timeout: int) -> dict[str, Any]:
    return {"httpGet": {"path": path, "port": "http"}, "periodSeconds": period,
            "failureThreshold": failures, "timeoutSeconds": timeout}


def build_pod_template(owner: Mapping[str, Any], spec: ServiceSpec, track: str,
                       rev: str) -> dict[str, Any]:
    service = owner["metadata"]["name"]
    worker = spec.worker
    resources = worker.resources.model_dump(mode="json", by_alias=True, exclude_none=True)
    container = {
        "name": CONTAINER,
        "image": worker.image,
        "imagePullPolicy": worker.image_pull_policy,
        "command": list(WORKER_COMMAND),
        "args": worker_args(spec),
        "ports": [{"name": "http", "containerPort": HTTP_PORT, "protocol": "TCP"}],
        "env": _env(service, track, rev, spec),
        "resources": {k: v for k, v in resources.items() if v},
        # Loading the model can take minutes: the startup probe holds liveness off until then.
        "startupProbe": _probe("/healthz", period=5, failures=120, timeout=3),
        "livenessProbe": _probe("/healthz", period=10, failures=3, timeout=5),
        "readinessProbe": _probe("/readyz", period=5, failures=3, timeout=3),
        # Endpoint removal reaches proxies and load balancers a moment after the deletion:
        # keep serving that long, then SIGTERM stops admission and drains what is in flight.
        "lifecycle": {"preStop": {"sleep": {"seconds": PRESTOP_SLEEP_S}}},
        "volumeMounts": [
            {"name": POLICY_VOLUME, "mountPath": k8s.POLICY_MOUNT_DIR, "readOnly": True},
            {"name": "tmp", "mountPath": "/tmp"},
        ],
        "securityContext": {
            "allowPrivilegeEscalation": False,
            "readOnlyRootFilesystem": True,
            "runAsNonRoot": True,
            "capabilities": {"drop": ["ALL"]},
        },
    }
    pod_spec: dict[str, Any] = {
        "automountServiceAccountToken": False,  # workers never talk to the API server
        "enableServiceLinks": False,
        # the preStop sleep, then in-flight generations drain on SIGTERM
        "terminationGracePeriodSeconds": PRESTOP_SLEEP_S + DRAIN_S,
        "securityContext": {
            "runAsNonRoot": True,
            "runAsUser": WORKER_UID,
            "runAsGroup": WORKER_UID,
            "fsGroup": WORKER_UID,
            "seccompProfile": {"type": "RuntimeDefault"},
        },
        "containers": [container],
        "volumes": [
            # No subPath: a mounted ConfigMap then updates in place and the worker hot-reloads.
            {"name": POLICY_VOLUME, "configMap": {"name": configmap_name(service, track)}},
            {"name": "tmp", "emptyDir": {}},
        ],
    }
    if worker.node_selector:
        pod_spec["nodeSelector"] = dict(worker.node_selector)
    tolerations = _tolerations(spec)
    if tolerations:
        pod_spec["tolerations"] = tolerations
    return {
        "metadata": {
            "labels": {**track_labels(service, track), k8s.LABEL_REVISION: rev},
            "annotations": {
                "prometheus.io/scrape": "true",
                "prometheus.io/port": str(HTTP_PORT),
                "prometheus.io/path": "/metrics",
                "kubectl.kubernetes.io/default-container": CONTAINER,
            },
        },
        "spec": pod_spec,
    }


def build_deployment(owner: Mapping[str, Any], spec: ServiceSpec, track: str,
                     replicas: int, rev: str) -> Manifest:
    service = owner["metadata"]["name"]
    return {
        "apiVersion": "apps/v1",
        "kind": "Deployment",
        "metadata": _metadata(owner, deployment_name(service, track),
                              {**track_labels(service, track), k8s.LABEL_REVISION: rev}),
        "spec": {
            "replicas": replicas,
            "selector": {"matchLabels": selector_labels(service, track)},
            "revisionHistoryLimit": 3,
            "progressDeadlineSeconds": 900,
            # Keep serving capacity during a roll: add one new worker before removing an old one.
            "strategy": {"type": "RollingUpdate",
                         "rollingUpdate": {"maxSurge": 1, "maxUnavailable": 0}},
            "template": build_pod_template(owner, spec, track, rev),
        },
    }


def desired_children(owner: Mapping[str, Any], spec: ServiceSpec,
                     policy: Policy | None = None,
                     operator_namespace: str | None = None) -> list[Manifest]:
    """Everything the operator core applies for one SpeculativeService, in apply order.

    The core runs the stable track only (a plain rolling update on pod changes); the canary
    track's children are built by the same functions when a canary rollout is in progress.
    The ConfigMap goes first so a new pod always finds its policy mounted. ``policy``: the
    spec's with the tuner's overlay (``spec.policy(overlay)``), else the spec's alone."""
    rev = revision(spec)
    return [
        build_configmap(owner, "stable", policy or spec.policy()),
        build_deployment(owner, spec, "stable", spec.replicas, rev),
        build_service(owner),
        build_network_policy(owner, spec, operator_namespace),
    ]
