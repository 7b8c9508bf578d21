"""Pure manifest builders: golden files a reader can review, and the properties that matter.

Goldens live in tests/golden/operator/<example>.yaml: the children the operator applies for
each sample in examples/ (after the CRD's defaults). Regenerate after an intended change with
``SPECD_UPDATE_GOLDEN=1 .venv/bin/pytest tests/test_operator_manifests.py`` and review the diff.
"""

from __future__ import annotations

import copy
import json
import os
from pathlib import Path

import pytest
import yaml

from specd.api import k8s
from specd.api.policy import POLICY_KEY, parse_policy
from specd.api.spec import parse_spec
from specd.operator import manifests as m

ROOT = Path(__file__).resolve().parents[1]
GOLDEN = ROOT / "tests" / "golden" / "operator"
EXAMPLES = sorted((ROOT / "examples").glob("speculativeservice-*.yaml"))
CRD = yaml.safe_load((ROOT / "crds" / "speculativeservice.yaml").read_text())
SCHEMA = CRD["spec"]["versions"][0]["schema"]["openAPIV3Schema"]


def apply_defaults(value, schema):
    """Structural defaulting as the API server does it (absent fields with a default get it,
    then recurse), so the goldens see exactly what the operator reads from the server."""
    if schema.get("type") == "object" and isinstance(value, dict):
        for key, sub in schema.get("properties", {}).items():
            if key not in value and "default" in sub:
                value[key] = copy.deepcopy(sub["default"])
            if key in value:
                value[key] = apply_defaults(value[key], sub)
        extra = schema.get("additionalProperties")
        if isinstance(extra, dict):
            for key in value:
                value[key] = apply_defaults(value[key], extra)
    elif schema.get("type") == "array" and isinstance(value, list):
        value = [apply_defaults(item, schema.get("items", {})) for item in value]
    return value


class _Dumper(yaml.SafeDumper):
    """Multi-line strings (the policy JSON) as literal blocks, so goldens read naturally."""


def _str(dumper: yaml.SafeDumper, value: str) -> yaml.ScalarNode:
    style = "|" if "\n" in value else None
    return dumper.represent_scalar("tag:yaml.org,2002:str", value, style=style)


_Dumper.add_representer(str, _str)


def owner_of(doc: dict) -> dict:
    obj = apply_defaults(copy.deepcopy(doc), SCHEMA)
    obj["metadata"] = {**obj["metadata"], "namespace": "default",
                       "uid": "00000000-0000-4000-8000-000000000001", "generation": 1}
    return obj


def children_of(path: Path) -> list[dict]:
    owner = owner_of(yaml.safe_load(path.read_text()))
    return m.desired_children(owner, parse_spec(owner["spec"]))


@pytest.mark.parametrize("example", EXAMPLES, ids=lambda p: p.stem)
def test_children_match_golden(example: Path) -> None:
    rendered = yaml.dump_all(children_of(example), Dumper=_Dumper, sort_keys=False, width=100)
    golden = GOLDEN / f"{example.stem}.yaml"
    if os.environ.get("SPECD_UPDATE_GOLDEN") == "1":
        golden.write_text(f"# Generated from examples/{example.name}: review diffs by eye.\n"
                          + rendered)
    assert golden.exists(), f"missing golden {golden}: run with SPECD_UPDATE_GOLDEN=1"
    expected = list(yaml.safe_load_all(golden.read_text()))
    assert list(yaml.safe_load_all(rendered)) == expected


def _sample() -> dict:
    return owner_of(yaml.safe_load((ROOT / "examples" / "speculativeservice-scheme-a.yaml")
                                   .read_text()))


def _build(owner: dict) -> dict[str, dict]:
    return {c["kind"]: c for c in m.desired_children(owner, parse_spec(owner["spec"]))}


def test_names_are_deterministic_and_owned() -> None:
    owner = _sample()
    first, second = _build(owner), _build(copy.deepcopy(owner))
    assert first == second
    assert first["Deployment"]["metadata"]["name"] == "smollm2-parallel-stable"
    assert first["ConfigMap"]["metadata"]["name"] == "smollm2-parallel-stable-policy"
    assert first["Service"]["metadata"]["name"] == "smollm2-parallel"
    for child in first.values():
        (ref,) = child["metadata"]["ownerReferences"]
        assert ref == {"apiVersion": k8s.API_VERSION, "kind": k8s.KIND,
                       "name": "smollm2-parallel", "uid": owner["metadata"]["uid"],
                       "controller": True, "blockOwnerDeletion": True}
        assert child["metadata"]["labels"][k8s.LABEL_MANAGED_BY] == "specd"


def test_policy_only_edit_changes_configmap_not_pod_template() -> None:
    owner = _sample()
    edited = copy.deepcopy(owner)
    edited["spec"]["verification"].update(fixedLength=2, survivalFloor=0.2)
    before, after = _build(owner), _build(edited)
    assert before["Deployment"] == after["Deployment"]
    assert before["Service"] == after["Service"]
    old = parse_policy(before["ConfigMap"]["data"][POLICY_KEY])
    new = parse_policy(after["ConfigMap"]["data"][POLICY_KEY])
    assert (old.fixed_length, new.fixed_length) == (3, 2)
    assert old.version() != new.version()
    annotation = after["ConfigMap"]["metadata"]["annotations"][m.POLICY_VERSION_ANNOTATION]
    assert annotation == new.version()


@pytest.mark.parametrize("edit", [
    ("model", "reference", "HuggingFaceTB/SmolLM2-360M-Instruct"),
    ("model", "dtype", "float32"),
    ("drafter", "k", 5),
    ("drafter", "promptLookup", True),
    ("engine", "maxBatch", 8),
    ("worker", "image", "specd-worker:0.2.0"),
])
def test_pod_changing_edit_changes_revision(edit: tuple[str, str, object]) -> None:
    section, key, value = edit
    owner = _sample()
    edited = copy.deepcopy(owner)
    edited["spec"][section][key] = value
    before, after = _build(owner), _build(edited)
    rev_before = before["Deployment"]["spec"]["template"]["metadata"]["labels"][k8s.LABEL_REVISION]
    rev_after = after["Deployment"]["spec"]["template"]["metadata"]["labels"][k8s.LABEL_REVISION]
    assert rev_before != rev_after
    # the selector is immutable in a Deployment: it must not carry the revision
    assert after["Deployment"]["spec"]["selector"] == before["Deployment"]["spec"]["selector"]


def test_scaling_keeps_the_revision() -> None:
    owner = _sample()
    edited = copy.deepcopy(owner)
    edited["spec"]["replicas"] = 7
    before, after = _build(owner), _build(edited)
    assert after["Deployment"]["spec"]["replicas"] == 7
    assert before["Deployment"]["spec"]["template"] == after["Deployment"]["spec"]["template"]


def test_worker_pod_shape() -> None:
    pod = _build(_sample())["Deployment"]["spec"]["template"]
    (container,) = pod["spec"]["containers"]
    assert container["resources"]["limits"]["nvidia.com/gpu"] == 1
    assert container["readinessProbe"]["httpGet"]["path"] == "/readyz"
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    # deleted: serve through the preStop sleep, then drain within the grace period
    prestop = container["lifecycle"]["preStop"]["sleep"]["seconds"]
    assert prestop > 0 and "--grace-period" not in container["args"]  # serve's 30 s default
    assert pod["spec"]["terminationGracePeriodSeconds"] > prestop + 30
    assert pod["spec"]["securityContext"]["runAsNonRoot"] is True
    assert container["securityContext"]["allowPrivilegeEscalation"] is False
    assert pod["spec"]["automountServiceAccountToken"] is False
    assert pod["metadata"]["annotations"]["prometheus.io/scrape"] == "true"
    mounts = {v["mountPath"]: v["name"] for v in container["volumeMounts"]}
    volumes = {v["name"]: v for v in pod["spec"]["volumes"]}
    assert volumes[mounts[k8s.POLICY_MOUNT_DIR]]["configMap"]["name"] == \
        "smollm2-parallel-stable-policy"
    args = container["args"]
    # the command is explicit (the pod runner and admission policies read it from the API)
    assert container["command"] == ["/usr/bin/tini", "--", "specd", "serve"]
    assert args[args.index("--policy-file") + 1] == f"{k8s.POLICY_MOUNT_DIR}/{POLICY_KEY}"
    assert args[args.index("--drafter") + 1] == "parallel"
    assert "--prompt-lookup" not in args
    env = {e["name"]: e["value"] for e in container["env"]}
    assert env["SPECD_TRACK"] == "stable" and env["HF_HUB_OFFLINE"] == "1"


def test_worker_flags_are_what_specd_serve_parses() -> None:
    """The operator's args and the worker's parser are one contract: every flag it writes
    (prompt lookup included) parses to the values of the spec."""
    import argparse

    from specd.commands import serve

    owner = _sample()
    owner["spec"]["drafter"]["promptLookup"] = True
    (container,) = _build(owner)["Deployment"]["spec"]["template"]["spec"]["containers"]
    parser = argparse.ArgumentParser()
    serve.add_arguments(parser)
    args = parser.parse_args(container["args"])
    assert args.prompt_lookup is True and args.drafter == "parallel"
    assert args.max_slots == owner["spec"].get("engine", {}).get("maxBatch", 16)


def test_policy_follows_drafter_when_mode_unset() -> None:
    base = {"model": {"reference": "m"}, "worker": {"image": "i"}}
    assert parse_spec(base).policy().mode == "plain"
    semi = {**base, "drafter": {"method": "semi-ar", "artifact": "a", "k": 6}}
    policy = parse_spec(semi).policy()
    assert (policy.mode, policy.k_max, policy.max_verify, policy.fixed_length) == \
        ("scheduled", 6, 6, 6)
    ngram = {**base, "drafter": {"method": "ngram", "k": 3}}
    assert parse_spec(ngram).policy().mode == "fixed"


def test_policy_document_round_trips() -> None:
    cm = _build(_sample())["ConfigMap"]
    text = cm["data"][POLICY_KEY]
    assert json.loads(text) == parse_policy(text).document()


def test_selector_string_selects_both_tracks() -> None:
    assert m.selector_string("svc") == f"{k8s.LABEL_SERVICE}=svc"
    service = _build(_sample())["Service"]
    assert k8s.LABEL_TRACK not in service["spec"]["selector"]


@pytest.mark.parametrize("quantity,threads", [("4", 4), ("2500m", 2), ("500m", 1), (0.5, 1),
                                              (3, 3), (None, None), ("lots", None), ("0", None)])
def test_cpu_threads_from_quantity(quantity, threads) -> None:
    assert m.cpu_threads(quantity) == threads


def test_worker_threads_follow_the_cpu_limit_unless_the_user_sets_them() -> None:
    owner = _sample()
    owner["spec"]["worker"]["resources"] = {"limits": {"cpu": "3500m"}}
    env = {e["name"]: e["value"] for e in
           _build(owner)["Deployment"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["OMP_NUM_THREADS"] == "3"
    owner["spec"]["worker"]["env"] = [{"name": "OMP_NUM_THREADS", "value": "1"}]
    env = {e["name"]: e["value"] for e in
           _build(owner)["Deployment"]["spec"]["template"]["spec"]["containers"][0]["env"]}
    assert env["OMP_NUM_THREADS"] == "1"


def test_network_policy_opens_the_serving_port_only() -> None:
    owner = _sample()
    policy = _build(owner)["NetworkPolicy"]
    assert policy["metadata"]["name"] == "smollm2-parallel-workers"
    spec = policy["spec"]
    # every track's workers, nothing else
    assert spec["podSelector"] == {"matchLabels": m.selector_labels("smollm2-parallel")}
    assert spec["policyTypes"] == ["Ingress"]
    (rule,) = spec["ingress"]
    assert rule == {"ports": [{"port": "http", "protocol": "TCP"}]}  # from anywhere


def test_network_policy_peers_and_the_operators_namespace() -> None:
    owner = _sample()
    client = {"namespaceSelector": {"matchLabels": {"team": "search"}}}
    owner["spec"]["network"] = {"allowFrom": [client, {"ipBlock": {"cidr": "10.8.0.0/16",
                                                                   "except": ["10.8.1.0/24"]}}]}
    spec = parse_spec(owner["spec"])
    alone = m.build_network_policy(owner, spec)["spec"]["ingress"][0]["from"]
    assert alone == [client, {"ipBlock": {"cidr": "10.8.0.0/16", "except": ["10.8.1.0/24"]}}]
    with_operator = m.build_network_policy(owner, spec, "specd-system")["spec"]["ingress"][0]
    assert with_operator["from"][-1] == {"namespaceSelector": {"matchLabels": {
        "kubernetes.io/metadata.name": "specd-system"}}}
    assert with_operator["ports"] == [{"port": "http", "protocol": "TCP"}]
    # who may connect is not part of the pod: no roll
    assert m.revision(spec) == m.revision(parse_spec(_sample()["spec"]))
