"""The real API server enforces the SpeculativeService schema: a table of invalid objects,
each rejected with a message naming the offending field; the samples and a full valid
object are accepted; `kubectl explain` teaches the fields."""

from __future__ import annotations

import copy
import json
import uuid
from pathlib import Path

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from specd.api import k8s
from specd_dev.testing import install_crd

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
DELETE = object()

BASE = {
    "apiVersion": k8s.API_VERSION,
    "kind": k8s.KIND,
    "metadata": {"name": "valid"},
    "spec": {
        "replicas": 2,
        "model": {"reference": "smollm2-135m", "dtype": "auto", "maxContext": 2048},
        "drafter": {"method": "semi-ar", "artifact": "/models/semi-ar", "k": 5},
        "verification": {"mode": "scheduled", "minVerify": 1, "maxVerify": 4,
                         "survivalFloor": 0.05, "maxBatchTokens": 512},
        "engine": {"maxBatch": 16, "queueBound": 64, "extraArgs": ["--cost-profile=none"]},
        "worker": {
            "image": "specd-worker:0.1.0",
            "resources": {"requests": {"nvidia.com/gpu": 1, "cpu": "2"},
                          "limits": {"nvidia.com/gpu": 1, "memory": "8Gi"}},
            "nodeSelector": {"gpu": "true"},
            "tolerations": [{"key": "nvidia.com/gpu", "operator": "Exists",
                             "effect": "NoSchedule"}],
            "env": [{"name": "HF_HUB_OFFLINE", "value": "1"}],
        },
        "rollout": {
            "strategy": "Canary",
            "policyChanges": "Canary",
            "steps": [{"weight": 10, "pause": {"duration": "1m"}}, {"weight": 50},
                      {"weight": 100}],
            "analysis": {"interval": "30s", "probes": {},
                         "metrics": [{"name": "tau", "metric": "acceptanceLength", "min": 0.9}]},
            "promote": {"id": "2026-01-01T00:00:00Z"},
        },
        "tuning": {"enabled": True, "interval": "5m",
                   "bounds": {"maxVerify": {"min": 2, "max": 5}}},
    },
}


def edit(*changes: tuple[str | tuple[str, ...], object]):
    """Set (or DELETE) dotted paths (or tuples of keys, for keys with dots); list indices as
    numbers: spec.worker.env.0.name."""
    def apply(obj: dict) -> dict:
        for path, value in changes:
            parts = list(path) if isinstance(path, tuple) else path.split(".")
            node = obj
            for part in parts[:-1]:
                node = node[int(part)] if isinstance(node, list) else node.setdefault(part, {})
            last = parts[-1]
            if value is DELETE:
                del node[last]
            elif isinstance(node, list):
                node[int(last)] = value
            else:
                node[last] = value
        return obj
    return apply


NO_DRAFTER = (("spec.drafter", {"method": "none"}), ("spec.tuning.enabled", False))

# (case id, edit of BASE, the field the server's message must name)
INVALID = [
    ("replicas negative", edit(("spec.replicas", -1)), "spec.replicas"),
    ("replicas wrong type", edit(("spec.replicas", "three")), "spec.replicas"),
    ("replicas too many", edit(("spec.replicas", 10000)), "spec.replicas"),
    ("model missing", edit(("spec.model", DELETE)), "spec.model"),
    ("model reference empty", edit(("spec.model.reference", "")), "spec.model.reference"),
    ("model reference with space", edit(("spec.model.reference", "a b")),
     "spec.model.reference"),
    ("dtype unknown", edit(("spec.model.dtype", "int3")), "spec.model.dtype"),
    ("maxContext too small", edit(("spec.model.maxContext", 16)), "spec.model.maxContext"),
    ("drafter method unknown", edit(("spec.drafter.method", "medusa")), "spec.drafter.method"),
    ("K zero", edit(("spec.drafter.k", 0)), "spec.drafter.k"),
    ("K above 16", edit(("spec.drafter.k", 17)), "spec.drafter.k"),
    ("K wrong type", edit(("spec.drafter.k", "five")), "spec.drafter.k"),
    ("artifact missing for semi-ar on a non-embedded model",
     edit(("spec.drafter.artifact", DELETE), ("spec.model.reference", "/models/llama")),
     "spec.drafter.artifact"),
    ("artifact given for ngram",
     edit(("spec.drafter.method", "ngram"), ("spec.verification.mode", "fixed")),
     "spec.drafter.artifact"),
    ("prompt lookup beside ngram",
     edit(("spec.drafter", {"method": "ngram", "k": 5, "promptLookup": True}),
          ("spec.verification.mode", "fixed")),
     "spec.drafter.promptLookup"),
    ("verification mode unknown", edit(("spec.verification.mode", "adaptive")),
     "spec.verification.mode"),
    ("fixed length above K",
     edit(("spec.verification.mode", "fixed"), ("spec.verification.fixedLength", 6)),
     "spec.verification.fixedLength"),
    ("min verify above max verify", edit(("spec.verification.minVerify", 5)),
     "spec.verification.minVerify"),
    ("max verify above K", edit(("spec.verification.maxVerify", 6)),
     "spec.verification.maxVerify"),
    ("survival floor above 1", edit(("spec.verification.survivalFloor", 1.5)),
     "spec.verification.survivalFloor"),
    ("survival floor negative", edit(("spec.verification.survivalFloor", -0.1)),
     "spec.verification.survivalFloor"),
    ("max batch tokens zero", edit(("spec.verification.maxBatchTokens", 0)),
     "spec.verification.maxBatchTokens"),
    ("scheduled without a drafter", edit(*NO_DRAFTER), "spec.verification.mode"),
    ("scheduled with ngram",
     edit(("spec.drafter", {"method": "ngram", "k": 5})), "spec.verification.mode"),
    ("tuning without a drafter",
     edit(("spec.drafter", {"method": "none"}), ("spec.verification.mode", "plain")),
     "spec.tuning.enabled"),
    ("engine max batch zero", edit(("spec.engine.maxBatch", 0)), "spec.engine.maxBatch"),
    ("engine queue bound negative", edit(("spec.engine.queueBound", -1)),
     "spec.engine.queueBound"),
    ("extra args override the port", edit(("spec.engine.extraArgs", ["--port=9000"])),
     "spec.engine.extraArgs"),
    ("extra args not strings", edit(("spec.engine.extraArgs", [1])), "spec.engine.extraArgs"),
    ("worker missing", edit(("spec.worker", DELETE)), "spec.worker"),
    ("image missing", edit(("spec.worker.image", DELETE)), "spec.worker.image"),
    ("image with space", edit(("spec.worker.image", "specd worker")), "spec.worker.image"),
    ("fractional GPU", edit((("spec", "worker", "resources", "limits", "nvidia.com/gpu"), "1.5"),
                            ("spec.worker.resources.requests", {"cpu": "1"})),
     "spec.worker.resources.limits"),
    ("GPU requests and limits mismatched",
     edit((("spec", "worker", "resources", "requests", "nvidia.com/gpu"), 2)),
     "spec.worker.resources.requests"),
    ("GPU requested without a limit",
     edit(("spec.worker.resources.limits", {"memory": "8Gi"})),
     "spec.worker.resources.requests"),
    ("memory not a quantity", edit(("spec.worker.resources.limits.memory", "lots")),
     "spec.worker.resources.limits"),
    ("toleration operator unknown", edit(("spec.worker.tolerations.0.operator", "Maybe")),
     "spec.worker.tolerations[0].operator"),
    ("toleration Exists with a value", edit(("spec.worker.tolerations.0.value", "x")),
     "spec.worker.tolerations[0].value"),
    ("env names duplicated",
     edit(("spec.worker.env", [{"name": "A", "value": "1"}, {"name": "A", "value": "2"}])),
     "spec.worker.env[1]"),
    ("env name not an identifier", edit(("spec.worker.env.0.name", "1BAD")),
     "spec.worker.env[0].name"),
    ("env name reserved", edit(("spec.worker.env.0.name", "SPECD_TRACK")),
     "spec.worker.env[0].name"),
    ("node selector value not a string", edit(("spec.worker.nodeSelector", {"gpu": 5})),
     "spec.worker.nodeSelector.gpu"),
    ("cpu request negative", edit(("spec.worker.resources.requests.cpu", "-2")),
     "spec.worker.resources.requests[cpu] must not be negative"),
    ("memory limit negative", edit(("spec.worker.resources.limits.memory", "-8Gi")),
     "spec.worker.resources.limits[memory] must not be negative"),
    ("GPU count negative", edit((("spec", "worker", "resources", "limits", "nvidia.com/gpu"), -1),
                                ("spec.worker.resources.requests", {"cpu": "1"})),
     "spec.worker.resources.limits[nvidia.com/gpu] must not be negative"),
    ("memory request above its limit", edit(("spec.worker.resources.requests.memory", "16Gi")),
     "spec.worker.resources.requests[memory] must not exceed"),
    ("cpu request above its limit", edit(("spec.worker.resources.limits.cpu", "500m")),
     "spec.worker.resources.requests[cpu] must not exceed"),
    ("toleration seconds without NoExecute",
     edit(("spec.worker.tolerations.0.tolerationSeconds", 30)),
     "spec.worker.tolerations[0].tolerationSeconds"),
    ("toleration key not a label key", edit(("spec.worker.tolerations.0.key", "gpu type")),
     "spec.worker.tolerations[0].key"),
    ("toleration value not a label value",
     edit(("spec.worker.tolerations.0", {"key": "gpu", "operator": "Equal", "value": "a/b",
                                         "effect": "NoSchedule"})),
     "spec.worker.tolerations[0].value"),
    ("node selector key not a label key", edit(("spec.worker.nodeSelector", {"gpu type": "a"})),
     "spec.worker.nodeSelector key gpu type is not a label key"),
    ("node selector key prefix not a DNS name",
     edit(("spec.worker.nodeSelector", {"Example.COM/gpu": "a"})),
     "spec.worker.nodeSelector key Example.COM/gpu"),
    ("node selector value not a label value",
     edit(("spec.worker.nodeSelector", {"gpu": "-true-"})), "spec.worker.nodeSelector.gpu"),
    ("rollout strategy unknown", edit(("spec.rollout.strategy", "BlueGreen")),
     "spec.rollout.strategy"),
    ("canary weights decreasing",
     edit(("spec.rollout.steps", [{"weight": 50}, {"weight": 10}])), "spec.rollout.steps"),
    ("canary weights repeated",
     edit(("spec.rollout.steps", [{"weight": 10}, {"weight": 10}])), "spec.rollout.steps"),
    ("canary weight zero", edit(("spec.rollout.steps.0.weight", 0)),
     "spec.rollout.steps[0].weight"),
    ("canary weight above 100", edit(("spec.rollout.steps.2.weight", 101)),
     "spec.rollout.steps[2].weight"),
    ("pause duration not a duration",
     edit(("spec.rollout.steps.0.pause.duration", "5 minutes")),
     "spec.rollout.steps[0].pause.duration"),
    ("canary without steps", edit(("spec.rollout.steps", DELETE)), "spec.rollout.steps"),
    ("analysis min above max", edit(("spec.rollout.analysis.metrics.0.max", 0.5)),
     "spec.rollout.analysis.metrics[0].min"),
    ("analysis metric without threshold",
     edit(("spec.rollout.analysis.metrics.0.min", DELETE)), "spec.rollout.analysis.metrics[0]"),
    ("analysis custom metric without query",
     edit(("spec.rollout.analysis.metrics.0.metric", "custom")),
     "spec.rollout.analysis.metrics[0].query"),
    ("analysis metric unknown", edit(("spec.rollout.analysis.metrics.0.metric", "latencyP99")),
     "spec.rollout.analysis.metrics[0].metric"),
    ("analysis under a rolling update",
     edit(("spec.rollout.strategy", "RollingUpdate"), ("spec.rollout.steps", DELETE)),
     "spec.rollout.analysis"),
    ("relative custom query that ignores the track",
     edit(("spec.rollout.analysis.metrics.0.metric", "custom"),
          ("spec.rollout.analysis.metrics.0.query", "sum(rate(specd_rounds_total[1m]))")),
     "spec.rollout.analysis.metrics[0].query"),
    ("kv cache usage by task group",
     edit(("spec.rollout.analysis.metrics.0.metric", "kvCacheUsage"),
          ("spec.rollout.analysis.metrics.0.byTaskGroup", True)),
     "spec.rollout.analysis.metrics[0].byTaskGroup"),
    ("policy canary under a rolling update",
     edit(("spec.rollout.strategy", "RollingUpdate"), ("spec.rollout.steps", DELETE),
          ("spec.rollout.analysis", DELETE), ("spec.rollout.policyChanges", "Canary")),
     "spec.rollout.policyChanges"),
    ("policy changes unknown", edit(("spec.rollout.policyChanges", "Later")),
     "spec.rollout.policyChanges"),
    ("probes without prompts", edit(("spec.rollout.analysis.probes", {"prompts": []})),
     "spec.rollout.analysis.probes.prompts"),
    ("probe prompt empty", edit(("spec.rollout.analysis.probes", {"prompts": [""]})),
     "spec.rollout.analysis.probes.prompts[0]"),
    ("probe tokens above 256", edit(("spec.rollout.analysis.probes", {"maxTokens": 1000})),
     "spec.rollout.analysis.probes.maxTokens"),
    ("probe near-tie gap negative", edit(("spec.rollout.analysis.probes", {"nearTieGap": -1})),
     "spec.rollout.analysis.probes.nearTieGap"),
    ("inconclusive policy unknown", edit(("spec.rollout.inconclusivePolicy", "Ignore")),
     "spec.rollout.inconclusivePolicy"),
    ("promote without id", edit(("spec.rollout.promote", {"full": True})),
     "spec.rollout.promote.id"),
    ("paused not a boolean", edit(("spec.rollout.paused", "no")), "spec.rollout.paused"),
    ("tuning interval not a duration", edit(("spec.tuning.interval", "often")),
     "spec.tuning.interval"),
    ("tuning bounds min above max", edit(("spec.tuning.bounds.maxVerify.min", 5),
                                         ("spec.tuning.bounds.maxVerify.max", 3)),
     "spec.tuning.bounds.maxVerify"),
    ("tuning bound above K", edit(("spec.tuning.bounds.maxVerify.max", 8)),
     "spec.tuning.bounds.maxVerify.max"),
    ("verification group unknown", edit(("spec.verification.groups", {"poetry": {"mode": "plain"}})),
     "spec.verification.groups: keys must be task groups"),
    ("verification group K above the drafter's",
     edit(("spec.verification.groups", {"code": {"k": 12}})),
     "spec.verification.groups: k, fixedLength and maxVerify must be <= spec.drafter.k"),
    ("verification group mode unknown",
     edit(("spec.verification.groups", {"code": {"mode": "greedy"}})),
     "spec.verification.groups.code.mode"),
    ("calibration temperature zero",
     edit(("spec.verification.calibration", {"temperature": [0]})),
     "spec.verification.calibration.temperature[0]"),
    ("tuning pins an unknown group", edit(("spec.tuning.pinnedGroups", ["poetry"])),
     "spec.tuning.pinnedGroups[0]"),
    ("tuning reference share above half", edit(("spec.tuning.referenceShare", 0.9)),
     "spec.tuning.referenceShare"),
    ("tuning judges windows of too few requests", edit(("spec.tuning.minRequests", 2)),
     "spec.tuning.minRequests"),
    ("network peer with an ipBlock and a selector",
     edit(("spec.network.allowFrom", [{"ipBlock": {"cidr": "10.0.0.0/8"},
                                       "podSelector": {"matchLabels": {"app": "client"}}}])),
     "spec.network.allowFrom[]: set ipBlock, or podSelector"),
    ("network peer cidr not a CIDR",
     edit(("spec.network.allowFrom", [{"ipBlock": {"cidr": "10.0.0.300/8"}}])),
     "spec.network.allowFrom[].ipBlock.cidr must be a CIDR"),
    ("network peer selector operator unknown",
     edit(("spec.network.allowFrom", [{"namespaceSelector": {"matchExpressions": [
         {"key": "team", "operator": "Like"}]}}])),
     "spec.network.allowFrom[0].namespaceSelector.matchExpressions[0].operator"),
    ("name too long", edit(("metadata.name", "a" * 41)), "metadata.name"),
    ("name not a DNS-1035 label", edit(("metadata.name", "9lives")), "metadata.name"),
    ("unknown field", edit(("spec.drafter.kk", 3)), "spec.drafter.kk"),
]


@pytest.fixture(scope="module")
def api(cluster):
    install_crd(cluster)
    return client.CustomObjectsApi(cluster.api_client())


def create(api, namespace: str, obj: dict, dry_run: bool = False) -> dict:
    kwargs = {"field_validation": "Strict"}
    if dry_run:
        kwargs["dry_run"] = "All"
    return api.create_namespaced_custom_object(k8s.GROUP, k8s.VERSION, namespace, k8s.PLURAL,
                                               obj, **kwargs)


def test_table_has_at_least_thirty_cases() -> None:
    assert len(INVALID) >= 30
    assert len({case for case, _, _ in INVALID}) == len(INVALID)


def test_valid_base_is_accepted_and_defaulted(api, cluster_namespace) -> None:
    created = create(api, cluster_namespace, copy.deepcopy(BASE), dry_run=True)
    assert created["spec"]["rollout"]["automaticRollback"] is True  # a schema default
    assert created["spec"]["rollout"]["analysis"]["probes"] == {"maxTokens": 32,
                                                                "nearTieGap": 0.1}
    assert created["spec"]["engine"]["maxBatch"] == 16


@pytest.mark.parametrize("case, change, field", INVALID, ids=[c[0] for c in INVALID])
def test_invalid_object_rejected_naming_the_field(api, cluster_namespace, case, change,
                                                  field) -> None:
    obj = change(copy.deepcopy(BASE))
    obj["metadata"].setdefault("name", f"bad-{uuid.uuid4().hex[:6]}")
    with pytest.raises(ApiException) as info:
        create(api, cluster_namespace, obj)
    assert info.value.status in (400, 422), info.value.body
    message = json.loads(info.value.body)["message"]
    assert field in message, f"{case}: {message}"


def test_valid_quantities_labels_and_tolerations_are_accepted(api, cluster_namespace) -> None:
    """The rules above refuse only what can never run: these all can."""
    obj = edit(("spec.worker.resources", {"requests": {"cpu": "500m", "memory": "8Gi",
                                                       "nvidia.com/gpu": 1},
                                          "limits": {"cpu": 2, "memory": "8Gi",
                                                     "nvidia.com/gpu": 1}}),
               ("spec.worker.nodeSelector", {"nvidia.com/gpu.present": "true",
                                             "topology.kubernetes.io/zone": "",
                                             "node_pool": "A-1.b"}),
               ("spec.worker.tolerations", [
                   {"key": "node.kubernetes.io/unreachable", "operator": "Exists",
                    "effect": "NoExecute", "tolerationSeconds": 60},
                   {"operator": "Exists"},
                   {"key": "pool", "operator": "Equal", "value": "gpu_a100",
                    "effect": "NoSchedule"}]),
               ("spec.verification.groups", {"code": {"mode": "plain"},
                                             "chat": {"k": 3, "maxVerify": 3}}),
               ("spec.tuning.pinnedGroups", ["code"]),
               ("spec.network.allowFrom", [
                   {"namespaceSelector": {"matchLabels": {"team": "search"}},
                    "podSelector": {"matchExpressions": [{"key": "app", "operator": "In",
                                                          "values": ["api"]}]}},
                   {"ipBlock": {"cidr": "10.8.0.0/16", "except": ["10.8.1.0/24"]}}]))(
        copy.deepcopy(BASE))
    created = create(api, cluster_namespace, obj, dry_run=True)
    assert created["spec"]["worker"]["tolerations"][0]["tolerationSeconds"] == 60
    assert created["spec"]["tuning"]["referenceShare"] == 0.05  # a schema default


def test_embedded_model_needs_no_drafter_artifact(api, cluster_namespace) -> None:
    """The smallest sample a newcomer writes: semi-ar on the embedded model, no artifact
    (its trained drafters ship with specd)."""
    obj = edit(("spec.drafter.artifact", DELETE), ("metadata.name", "embedded-drafter"))(
        copy.deepcopy(BASE))
    created = api.create_namespaced_custom_object(k8s.GROUP, k8s.VERSION, cluster_namespace,
                                                  k8s.PLURAL, obj)
    assert "artifact" not in created["spec"]["drafter"]


def test_samples_apply_cleanly(cluster, api, cluster_namespace) -> None:
    samples = sorted((ROOT / "examples").glob("speculativeservice-*.yaml"))
    assert len(samples) >= 3
    for sample in samples:
        out = cluster.kubectl("apply", "--dry-run=server", "-n", cluster_namespace,
                              "-f", str(sample))
        assert "created (server dry run)" in out.stdout, sample


def test_kubectl_explain_teaches_the_fields(cluster, api) -> None:
    out = cluster.kubectl("explain", f"{k8s.SHORT_NAME}.spec.verification").stdout
    for field in ("mode", "fixedLength", "minVerify", "maxVerify", "survivalFloor",
                  "maxBatchTokens"):
        assert field in out
    assert "Scheme B" in out and "hot-reloaded" in out
    out = cluster.kubectl("explain", f"{k8s.SHORT_NAME}.spec.drafter.method").stdout
    assert "semi-ar" in out
