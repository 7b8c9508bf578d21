"""The Helm chart (helm/specd), rendered with the helm binary of the local cluster's cache:
lint over every ci/ scenario, which objects exist and what their RBAC allows, the values
schema refusing typos, the CRD equal to crds/, and a checkov scan of the rendered chart and of
the operator's worker manifests (tests/golden/operator/, kept equal to the builders by
tests/test_operator_manifests.py) with every remaining finding listed below with its reason.
The live install, upgrade and uninstall are tests/integration/test_helm_install.py."""

from __future__ import annotations

import shutil
import subprocess
from collections import Counter
from pathlib import Path

import pytest
import yaml

ROOT = Path(__file__).resolve().parents[1]
CHART = ROOT / "helm" / "specd"
SCENARIOS = sorted(p.stem.removesuffix("-values") for p in (CHART / "ci").glob("*-values.yaml"))
KUBE_VERSION = "1.34.4"
NAMESPACE = "specd-system"
RELEASE = "r"
WRITE_VERBS = {"create", "update", "patch", "delete", "deletecollection", "*"}

# checkov findings left on purpose: check id -> why
CHART_ACCEPTED = {
    "CKV_K8S_15": "imagePullPolicy IfNotPresent: the default image is a fixed tag (the chart's "
                  "appVersion) or a digest; Always is one value away (operator.image.pullPolicy)",
    "CKV_K8S_43": "image digest: no published digest to default to; operator.image.digest and "
                  "dashboard.image.digest pin one",
    "CKV_K8S_38": "the operator and the dashboard talk to the API server: they need their "
                  "ServiceAccount token (the workers do not mount one)",
    "CKV_K8S_35": "the history store's PostgreSQL URL and the OIDC secrets reach the process as "
                  "env from secretKeyRef (never written in the pod spec): `specd operator` "
                  "reads SPECD_HISTORY_URL",
}
WORKER_ACCEPTED = {
    "CKV_K8S_15": "worker.imagePullPolicy defaults to IfNotPresent: the samples use a fixed "
                  "tag; users set Always in the spec",
    "CKV_K8S_43": "the samples' image is a tag; spec.worker.image takes a digest",
    "CKV_K8S_21": "the golden files are rendered in namespace default; the operator writes "
                  "children in their SpeculativeService's own namespace",
}


@pytest.fixture(scope="module")
def helm(helm_bin):
    def run(*args: str, check: bool = True) -> subprocess.CompletedProcess:
        out = subprocess.run([str(helm_bin), *args], capture_output=True, text=True,
                             timeout=120)
        if check:
            assert out.returncode == 0, out.stderr
        return out

    return run


def values_file(scenario: str) -> Path:
    return CHART / "ci" / f"{scenario}-values.yaml"


@pytest.fixture(scope="module")
def template(helm):
    """``template(scenario, *--set args)``: the rendered objects (a list of dicts)."""
    def render(scenario: str = "default", *sets: str, check: bool = True):
        args = ["template", RELEASE, str(CHART), "-n", NAMESPACE, "--kube-version",
                KUBE_VERSION, "-f", str(values_file(scenario))]
        for item in sets:
            args += ["--set", item]
        out = helm(*args, check=check)
        if not check:
            return out
        return [d for d in yaml.safe_load_all(out.stdout) if d]

    return render


def find(objects: list[dict], kind: str, name: str | None = None) -> list[dict]:
    return [o for o in objects if o["kind"] == kind
            and (name is None or o["metadata"]["name"] == name)]


def one(objects: list[dict], kind: str, name: str | None = None) -> dict:
    (found,) = find(objects, kind, name)
    return found


def rule_set(rules: list[dict]) -> set[tuple[str, str, str]]:
    return {(group, resource, verb) for r in rules for group in r["apiGroups"]
            for resource in r["resources"] for verb in r["verbs"]}


DEPLOY_RULES = rule_set(one(list(yaml.safe_load_all((ROOT / "deploy" / "rbac.yaml")
                                                    .read_text())), "ClusterRole")["rules"])


# ---- lint and objects ---------------------------------------------------------------------

def test_there_are_the_four_scenarios() -> None:
    assert SCENARIOS == ["dashboard-with-controls", "default", "namespaced", "postgresql"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_lint_strict(helm, scenario: str) -> None:
    out = helm("lint", "--strict", str(CHART), "-f", str(values_file(scenario)))
    assert "0 chart(s) failed" in out.stdout


@pytest.mark.parametrize("scenario, kinds", [
    ("default", {"CustomResourceDefinition": 1, "ServiceAccount": 1, "ClusterRole": 1,
                 "ClusterRoleBinding": 1, "Deployment": 1, "Service": 1,
                 "PersistentVolumeClaim": 1, "NetworkPolicy": 1}),
    ("namespaced", {"CustomResourceDefinition": 1, "ServiceAccount": 1, "ClusterRole": 1,
                    "ClusterRoleBinding": 1, "Role": 2, "RoleBinding": 2, "Deployment": 1,
                    "Service": 1, "NetworkPolicy": 1}),
    ("dashboard-with-controls", {"CustomResourceDefinition": 1, "ServiceAccount": 2,
                                 "ClusterRole": 2, "ClusterRoleBinding": 2, "Deployment": 2,
                                 "Service": 2, "PersistentVolumeClaim": 1,
                                 "NetworkPolicy": 2, "PodMonitor": 1, "ServiceMonitor": 1}),
    ("postgresql", {"CustomResourceDefinition": 1, "ServiceAccount": 2, "ClusterRole": 2,
                    "ClusterRoleBinding": 2, "Deployment": 2, "Service": 2,
                    "NetworkPolicy": 2}),
])
def test_which_objects_exist(template, scenario: str, kinds: dict[str, int]) -> None:
    objects = template(scenario)
    assert Counter(o["kind"] for o in objects) == kinds
    for obj in objects:
        if obj["kind"] not in ("CustomResourceDefinition", "ClusterRole",
                               "ClusterRoleBinding"):
            assert obj["metadata"].get("namespace"), obj["metadata"]["name"]


def test_without_crds_or_network_policy(template) -> None:
    kinds = {o["kind"] for o in template("default", "installCRDs=false",
                                         "networkPolicy.enabled=false")}
    assert "CustomResourceDefinition" not in kinds and "NetworkPolicy" not in kinds


# ---- RBAC -----------------------------------------------------------------------------------

def test_cluster_wide_rbac_equals_deploy_rbac(template) -> None:
    objects = template("default")
    role = one(objects, "ClusterRole", "r-specd-operator")
    assert rule_set(role["rules"]) == DEPLOY_RULES
    binding = one(objects, "ClusterRoleBinding")
    assert binding["subjects"] == [{"kind": "ServiceAccount", "name": "r-specd-operator",
                                    "namespace": NAMESPACE}]
    assert one(objects, "ServiceAccount")["metadata"]["name"] == "r-specd-operator"


def test_namespaced_rbac_is_the_same_rules_split(template) -> None:
    objects = template("namespaced")
    cluster = rule_set(one(objects, "ClusterRole")["rules"])
    # cluster-wide only what a Role cannot grant: reading CRDs and namespaces
    assert {resource for _, resource, _ in cluster} == {"customresourcedefinitions",
                                                        "namespaces"}
    assert {verb for _, _, verb in cluster} == {"list", "watch"}
    roles = find(objects, "Role")
    assert sorted(r["metadata"]["namespace"] for r in roles) == ["team-a", "team-b"]
    for role in roles:
        assert rule_set(role["rules"]) | cluster == DEPLOY_RULES
    assert sorted(b["metadata"]["namespace"] for b in find(objects, "RoleBinding")) == [
        "team-a", "team-b"]
    args = one(objects, "Deployment")["spec"]["template"]["spec"]["containers"][0]["args"]
    assert [a for a in args if a.startswith("--namespace")] == ["--namespace=team-a",
                                                               "--namespace=team-b"]


@pytest.mark.parametrize("scenario", SCENARIOS)
def test_operator_rbac_is_least_privilege(template, scenario: str) -> None:
    objects = template(scenario)
    rules = set()
    for kind in ("ClusterRole", "Role"):
        for role in find(objects, kind):
            if role["metadata"]["name"].endswith("-operator"):
                rules |= rule_set(role["rules"])
    verbs = {verb for _, _, verb in rules}
    assert not verbs & {"delete", "deletecollection", "*", "escalate", "bind", "impersonate"}
    assert not {r for _, r, _ in rules} & {"secrets", "*", "roles", "clusterroles"}
    assert {v for _, r, v in rules if r == "pods"} == {"get", "list"}


def dashboard_rules(objects: list[dict]) -> set[tuple[str, str, str]]:
    return {rule for kind in ("ClusterRole", "Role") for role in find(objects, kind)
            if role["metadata"]["name"].endswith("-dashboard")
            for rule in rule_set(role["rules"])}


def test_read_only_dashboard_has_no_write_verb(template) -> None:
    rules = dashboard_rules(template("postgresql"))
    assert rules and not {verb for _, _, verb in rules} & WRITE_VERBS
    assert not {r for _, r, _ in rules} & {"secrets", "*"}
    namespaced = dashboard_rules(template("namespaced", "dashboard.enabled=true"))
    assert namespaced == rules


def test_dashboard_controls_patch_speculativeservices_only(template) -> None:
    rules = dashboard_rules(template("dashboard-with-controls"))
    writes = {rule for rule in rules if rule[2] in WRITE_VERBS}
    assert writes == {("serving.specd.io", "speculativeservices", "patch")}
    env = {e["name"]: e for e in one(template("dashboard-with-controls"), "Deployment",
                                     "r-specd-dashboard")["spec"]["template"]["spec"][
        "containers"][0]["env"]}
    assert env["SPECD_DASHBOARD_CONTROLS"]["value"] == "enabled"
    assert env["SPECD_OIDC_CLIENT_SECRET"]["valueFrom"]["secretKeyRef"] == {
        "name": "specd-dashboard-oidc", "key": "clientSecret"}
    # the settings `specd dashboard` needs to start with controls on
    from specd.dashboard.config import DashboardConfig

    cfg = DashboardConfig.from_env({k: v["value"] for k, v in env.items() if "value" in v})
    assert cfg.controls and cfg.oidc
    assert cfg.allowed_users == ("alice@example.com", "bob@example.com")


# ---- values schema --------------------------------------------------------------------------

@pytest.mark.parametrize("bad, says", [
    # a typo anywhere is an unknown key
    ("operator.histroy.type=none", "additional properties 'histroy' not allowed"),
    ("operator.history.sqlite.persistance.enabled=false",
     "additional properties 'persistance' not allowed"),
    ("dashboard.controls.enable=true", "additional properties 'enable' not allowed"),
    ("watchNamespace={a}", "additional properties 'watchNamespace' not allowed"),
    ("monitoring.podMonitor.enabeld=true", "additional properties 'enabeld' not allowed"),
    # a known key with a value that cannot work
    ("operator.history.type=mysql", "/operator/history/type"),
    ("operator.history.type=postgresql", "existingSecret"),
    ("operator.prometheusUrl=prometheus:9090", "/operator/prometheusUrl"),
    ("operator.resources.limits.cpu=lots", "/operator/resources/limits/cpu"),
])
def test_a_typo_or_a_wrong_value_fails_schema_validation(template, bad: str, says: str) -> None:
    out = template("default", bad, check=False)
    assert out.returncode != 0 and says in out.stderr, out.stderr


def test_every_schema_object_refuses_unknown_keys() -> None:
    import json

    schema = json.loads((CHART / "values.schema.json").read_text())

    def walk(node: dict, where: str) -> list[str]:
        bad = []
        if "properties" in node and node.get("additionalProperties") is not False:
            bad.append(where)
        for key, child in node.get("properties", {}).items():
            if isinstance(child, dict):
                bad += walk(child, f"{where}.{key}")
        return bad

    assert walk({k: v for k, v in schema.items() if k != "allOf"}, "values") == []


# ---- the CRD --------------------------------------------------------------------------------

def test_chart_crd_copy_is_identical_to_crds() -> None:
    assert (CHART / "files" / "speculativeservice.yaml").read_bytes() == \
        (ROOT / "crds" / "speculativeservice.yaml").read_bytes(), \
        "cp crds/speculativeservice.yaml helm/specd/files/"


def test_rendered_crd_is_crds_plus_the_keep_annotation(template) -> None:
    rendered = one(template("default"), "CustomResourceDefinition")
    expected = yaml.safe_load((ROOT / "crds" / "speculativeservice.yaml").read_text())
    expected["metadata"]["annotations"] = {"helm.sh/resource-policy": "keep"}
    assert rendered == expected


# ---- the operator Deployment ----------------------------------------------------------------

def operator_pod(objects: list[dict]) -> dict:
    return one(objects, "Deployment", "r-specd-operator")["spec"]["template"]["spec"]


def test_operator_deployment_defaults(template) -> None:
    objects = template("default")
    pod = operator_pod(objects)
    (container,) = pod["containers"]
    assert container["command"] == ["/usr/bin/tini", "--", "specd", "operator"]
    assert container["image"] == "specd-operator:0.1.0"
    assert "--history-url=sqlite:////var/lib/specd/history.db" in container["args"]
    assert not [a for a in container["args"] if a.startswith(("--prometheus-url",
                                                              "--namespace"))]
    assert {p["name"]: p["containerPort"] for p in container["ports"]} == {
        "health": 8080, "metrics": 9090}
    for probe in ("startupProbe", "livenessProbe", "readinessProbe"):
        assert container[probe]["httpGet"] == {"path": "/healthz", "port": "health"}
    assert set(container["resources"]["limits"]) == {"cpu", "memory"}
    security = container["securityContext"]
    assert security["readOnlyRootFilesystem"] and security["runAsNonRoot"]
    assert security["capabilities"] == {"drop": ["ALL"]}
    assert not security["allowPrivilegeEscalation"]
    assert pod["securityContext"]["runAsUser"] == 10001
    assert pod["serviceAccountName"] == "r-specd-operator"
    env = {e["name"]: e for e in container["env"]}  # its namespace: the workers' NetworkPolicy
    assert env["SPECD_OPERATOR_NAMESPACE"]["valueFrom"] == {
        "fieldRef": {"fieldPath": "metadata.namespace"}}
    volumes = {v["name"]: v for v in pod["volumes"]}
    assert volumes["history"]["persistentVolumeClaim"] == {"claimName": "r-specd-operator-history"}
    assert "emptyDir" in volumes["tmp"]
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/tmp", "/var/lib/specd"}
    pvc = one(objects, "PersistentVolumeClaim")
    assert pvc["spec"]["resources"]["requests"]["storage"] == "1Gi"
    assert "storageClassName" not in pvc["spec"]  # the cluster's default class
    assert one(objects, "Deployment", "r-specd-operator")["spec"]["strategy"] == {
        "type": "Recreate"}


def test_operator_with_postgresql_reads_the_url_from_the_secret(template) -> None:
    (container,) = operator_pod(template("postgresql"))["containers"]
    assert "--prometheus-url=http://prometheus.monitoring:9090" in container["args"]
    assert not [a for a in container["args"] if a.startswith("--history-url")]
    env = {e["name"]: e for e in container["env"]}
    assert env["SPECD_HISTORY_URL"]["valueFrom"]["secretKeyRef"] == {"name": "specd-history",
                                                                     "key": "url"}
    assert {m["mountPath"] for m in container["volumeMounts"]} == {"/tmp"}


def test_history_options(template) -> None:
    objects = template("namespaced")
    volumes = {v["name"]: v for v in operator_pod(objects)["volumes"]}
    assert volumes["history"] == {"name": "history", "emptyDir": {}}
    assert not find(objects, "PersistentVolumeClaim")
    none = operator_pod(template("default", "operator.history.type=none"))
    assert "--history-url=none" in none["containers"][0]["args"]
    claim = template("default", "operator.history.sqlite.persistence.existingClaim=mine")
    assert not find(claim, "PersistentVolumeClaim")
    assert {v["name"]: v for v in operator_pod(claim)["volumes"]}["history"][
        "persistentVolumeClaim"] == {"claimName": "mine"}
    digest = "sha256:" + "ab" * 32
    pinned = operator_pod(template("default", f"operator.image.digest={digest}"))
    assert pinned["containers"][0]["image"] == f"specd-operator@{digest}"


def test_monitors_select_the_workers_and_the_operator(template) -> None:
    objects = template("dashboard-with-controls")
    pod_monitor = one(objects, "PodMonitor")
    assert pod_monitor["spec"]["selector"]["matchLabels"] == {
        "app.kubernetes.io/managed-by": "specd", "app.kubernetes.io/name": "specd-worker"}
    assert pod_monitor["metadata"]["labels"]["release"] == "prometheus"
    service_monitor = one(objects, "ServiceMonitor")
    metrics = one(objects, "Service", "r-specd-operator-metrics")
    assert service_monitor["spec"]["selector"]["matchLabels"] == metrics["spec"]["selector"]
    assert metrics["spec"]["selector"] == one(objects, "Deployment", "r-specd-operator")[
        "spec"]["selector"]["matchLabels"]


def test_notes_tell_the_next_three_commands(helm, tmp_path: Path) -> None:
    # NOTES.txt is only rendered by install; render it through a copy of the chart
    chart = tmp_path / "specd"
    shutil.copytree(CHART, chart)
    shutil.copy(chart / "templates" / "NOTES.txt", chart / "files" / "notes.txt")
    (chart / "templates" / "zz-notes.yaml").write_text(
        'notes: |\n{{ tpl ($.Files.Get "files/notes.txt") $ | indent 2 }}\n')
    out = helm("template", RELEASE, str(chart), "-n", NAMESPACE, "--kube-version",
               KUBE_VERSION, "-f", str(values_file("namespaced")), "--show-only",
               "templates/zz-notes.yaml")
    notes = yaml.safe_load(out.stdout)["notes"]
    commands = [line.strip() for line in notes.splitlines()
                if line.strip().startswith("kubectl")]
    assert commands == [
        "kubectl -n specd-system rollout status deployment/r-specd-operator",
        "kubectl apply -n team-a -f examples/speculativeservice-plain.yaml",
        "kubectl specd list -n team-a"]


# ---- security scan --------------------------------------------------------------------------

def remaining(failed: list[dict], accepted: dict[str, str]) -> list[str]:
    return sorted({f"{f['check_id']} {f['resource']}: {f['check_name']}" for f in failed
                   if f["check_id"] not in accepted})


@pytest.mark.slow
def test_checkov_on_the_rendered_chart(checkov, helm, tmp_path: Path) -> None:
    for scenario in SCENARIOS:
        out = helm("template", RELEASE, str(CHART), "-n", NAMESPACE, "--kube-version",
                   KUBE_VERSION, "-f", str(values_file(scenario)))
        (tmp_path / f"{scenario}.yaml").write_text(out.stdout)
    failed = checkov("kubernetes", tmp_path)
    assert remaining(failed, CHART_ACCEPTED) == []
    # every accepted finding still occurs: the list says what is true today
    assert {f["check_id"] for f in failed} == set(CHART_ACCEPTED)


@pytest.mark.slow
def test_checkov_on_the_worker_manifests(checkov) -> None:
    failed = checkov("kubernetes", ROOT / "tests" / "golden" / "operator")
    assert remaining(failed, WORKER_ACCEPTED) == []
    assert {f["check_id"] for f in failed} == set(WORKER_ACCEPTED)
