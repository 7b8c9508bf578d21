"""The pod runner's pure parts: which pods it runs (and that kwok's stage rule agrees), how a
container becomes a local argv/env, the kubelet's atomic volume writer, the pod status, the
HAProxy configuration and the Prometheus targets."""

from __future__ import annotations

import contextlib
import http.server
import json
import os
import shutil
import subprocess
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Iterator
from importlib import resources
from pathlib import Path

import pytest
import yaml

from specd.operator import manifests
from specd_dev.cluster.runner import admission, discovery, proxy, rules, status, volumes

ROOT = Path(__file__).resolve().parents[1]


def pod(containers: list[dict], **spec) -> dict:
    return {"metadata": {"name": "p", "namespace": "ns", "uid": "u-1",
                         "labels": {"serving.specd.io/track": "stable"}},
            "spec": {"containers": containers, "nodeName": "specd-gpu-0", **spec}}


RUNNER_PODS = [
    pod([{"name": "w", "command": ["specd", "serve"]}]),
    pod([{"name": "w", "command": ["/usr/bin/tini", "--", "/opt/venv/bin/specd", "serve"]}]),
    pod([{"name": "sidecar", "image": "x"}, {"name": "op", "command": ["specd", "operator"]}]),
    pod([{"name": "d", "command": ["specd", "dashboard"], "env": [{"name": "A", "value": "b"}]}]),
]
KWOK_PODS = [
    pod([{"name": "w", "image": "specd-worker"}]),  # image entrypoint: invisible, kwok's
    pod([{"name": "w", "command": ["specd"]}]),
    pod([{"name": "w", "command": ["specd", "train"]}]),
    pod([{"name": "w", "command": ["sh", "-c", "specd serve"]}]),
    pod([{"name": "w", "command": ["specd", "serve"],
          "env": [{"name": "LOCAL_POD_RUNNER", "value": "simulate"}]}]),
    {"metadata": {}, "spec": {}},
]


def test_runner_pods_are_specd_entry_points_unless_told_to_stay_simulated() -> None:
    assert all(rules.is_runner_pod(p) for p in RUNNER_PODS)
    assert not any(rules.is_runner_pod(p) for p in KWOK_PODS)


def test_the_operators_worker_pods_are_runner_pods() -> None:
    from specd.api.spec import ServiceSpec

    sample = yaml.safe_load((ROOT / "examples" / "speculativeservice-scheme-b.yaml").read_text())
    owner = {**sample, "metadata": {**sample["metadata"], "namespace": "ns", "uid": "u"}}
    template = manifests.build_pod_template(owner, ServiceSpec.model_validate(sample["spec"]),
                                            "stable", "rev")
    assert rules.is_runner_pod({"metadata": {}, "spec": template["spec"]})
    # the runner honours the worker's preStop hook (it keeps serving while proxies catch up)
    (container,) = template["spec"]["containers"]
    assert rules.prestop_sleep(container) == manifests.PRESTOP_SLEEP_S > 0


@pytest.mark.skipif(shutil.which("jq") is None, reason="jq (Debian) evaluates kwok's rule here")
def test_kwoks_stage_selector_is_the_same_rule() -> None:
    """The stage file carries rules.KWOK_SKIP_KEY on every pod stage; jq (the language gojq
    implements for kwok) gives the same verdict as the runner on every sample."""
    stages = list(yaml.safe_load_all(resources.files("specd_dev.cluster").joinpath(
        "stages/kwok-stages.yaml").read_text()))
    pod_stages = [s for s in stages if s and s["spec"]["resourceRef"]["kind"] == "Pod"]
    assert len(pod_stages) == 3
    for stage in pod_stages:
        keys = [e for e in stage["spec"]["selector"]["matchExpressions"]
                if e["key"] == rules.KWOK_SKIP_KEY]
        assert keys == [{"key": rules.KWOK_SKIP_KEY, "operator": "NotIn", "values": ["true"]}]
    for sample in RUNNER_PODS + KWOK_PODS:
        out = subprocess.run(["jq", "-c", rules.KWOK_SKIP_KEY], input=json.dumps(sample),
                             capture_output=True, text=True, check=True).stdout.strip()
        assert out == json.dumps(rules.is_runner_pod(sample)), sample


def test_argv_drops_tini_and_rewrites_hosts_ports_and_mount_paths() -> None:
    container = {"command": ["/usr/bin/tini", "--", "specd", "serve"],
                 "args": ["--host", "0.0.0.0", "--port", "8000", "--max-slots", "8000",
                          "--policy-file", "/etc/specd/policy/policy.json",
                          "--metrics-port=9090", "--bind=::"],
                 "ports": [{"containerPort": 8000}, {"containerPort": 9090}]}
    argv = rules.local_argv(container)
    assert argv[:2] == ["specd", "serve"]
    local = rules.localise_argv(argv, {"/etc/specd/policy": "/tmp/v/policy"},
                                {8000: 41000, 9090: 41001})
    assert local == ["specd", "serve", "--host", "127.0.0.1", "--port", "41000",
                     "--max-slots", "8000",  # not after a port flag: left alone
                     "--policy-file", "/tmp/v/policy/policy.json",
                     "--metrics-port=41001", "--bind=127.0.0.1"]
    env = rules.localise_env({"SPECD_PORT": "8000", "HOME": "/tmp", "SIZE": "8000",
                              "SPECD_HOST": "0.0.0.0"}, {"/tmp": "/x/tmp"}, {8000: 41000})
    assert env == {"SPECD_PORT": "41000", "HOME": "/x/tmp", "SIZE": "8000",
                   "SPECD_HOST": "127.0.0.1"}
    # a SQLite URL's file is in its mount too (the chart's --history-url)
    assert rules.localise_argv(["--history-url", "sqlite:////var/lib/specd/h.db",
                                "--x=sqlite:////etc/other.db"],
                               {"/var/lib/specd": "/x/history"}, {}) == [
        "--history-url", "sqlite:////x/history/h.db", "--x=sqlite:////etc/other.db"]


def test_env_resolves_like_the_kubelet() -> None:
    p = pod([])
    p["metadata"]["annotations"] = {"a/b": "note"}
    p["status"] = {"podIP": "10.245.1.2"}
    p["spec"]["serviceAccountName"] = "op"
    container = {
        "name": "w",
        "resources": {"limits": {"cpu": "1500m", "memory": "1Gi"}},
        "envFrom": [{"configMapRef": {"name": "cfg"}, "prefix": "CFG_"}],
        "env": [
            {"name": "NAME", "valueFrom": {"fieldRef": {"fieldPath": "metadata.name"}}},
            {"name": "NS", "valueFrom": {"fieldRef": {"fieldPath": "metadata.namespace"}}},
            {"name": "IP", "valueFrom": {"fieldRef": {"fieldPath": "status.podIP"}}},
            {"name": "SA", "valueFrom": {"fieldRef": {"fieldPath": "spec.serviceAccountName"}}},
            {"name": "TRACK", "valueFrom": {"fieldRef": {
                "fieldPath": "metadata.labels['serving.specd.io/track']"}}},
            {"name": "NOTE", "valueFrom": {"fieldRef": {
                "fieldPath": "metadata.annotations['a/b']"}}},
            {"name": "CPUS", "valueFrom": {"resourceFieldRef": {"resource": "limits.cpu"}}},
            {"name": "MEM_MI", "valueFrom": {"resourceFieldRef": {
                "resource": "limits.memory", "divisor": "1Mi"}}},
            {"name": "KEY", "valueFrom": {"configMapKeyRef": {"name": "cfg", "key": "k"}}},
            {"name": "PASS", "valueFrom": {"secretKeyRef": {"name": "s", "key": "p"}}},
            {"name": "GONE", "valueFrom": {"secretKeyRef": {"name": "s", "key": "x",
                                                            "optional": True}}},
            {"name": "URL", "value": "http://$(IP):8000/$(NAME)$$(NOT)"},
        ]}
    env = rules.resolve_env(p, container, {"cfg": {"k": "v"}}, {"s": {"p": "pw"}})
    assert env == {"CFG_k": "v", "NAME": "p", "NS": "ns", "IP": "10.245.1.2", "SA": "op",
                   "TRACK": "stable", "NOTE": "note", "CPUS": "2", "MEM_MI": "1024",
                   "KEY": "v", "PASS": "pw", "URL": "http://10.245.1.2:8000/p$(NOT)"}
    with pytest.raises(rules.PodSpecError, match="configMap 'nope'"):
        rules.resolve_env(p, {"env": [{"name": "X", "valueFrom": {
            "configMapKeyRef": {"name": "nope", "key": "k"}}}]}, {}, {})


def test_threads_follow_the_cpu_limit() -> None:
    assert rules.cpu_threads({"resources": {"limits": {"cpu": "2500m"}}}) == 2
    assert rules.cpu_threads({"resources": {"requests": {"cpu": "4"}}}) == 4
    assert rules.cpu_threads({"resources": {"limits": {"cpu": "100m"}}}) == 1
    assert rules.cpu_threads({}) == 1


def test_atomic_writer_swaps_the_data_link(tmp_path: Path) -> None:
    target = tmp_path / "policy"
    assert volumes.write_atomic(target, {"policy.json": b"{\"v\": 1}"})
    first = os.readlink(target / "..data")
    assert os.readlink(target / "policy.json") == "..data/policy.json"
    assert (target / "policy.json").read_bytes() == b"{\"v\": 1}"
    assert not volumes.write_atomic(target, {"policy.json": b"{\"v\": 1}"})  # no-op
    assert volumes.write_atomic(target, {"policy.json": b"{\"v\": 2}", "extra": b"x"})
    second = os.readlink(target / "..data")
    assert second != first and not (target / first).exists()  # old data removed
    assert (target / "policy.json").read_bytes() == b"{\"v\": 2}"
    assert volumes.write_atomic(target, {"extra": b"y"})
    assert not (target / "policy.json").exists() and (target / "extra").read_bytes() == b"y"


def test_projected_service_account_volume(tmp_path: Path) -> None:
    volume = {"name": "kube-api-access", "projected": {"sources": [
        {"serviceAccountToken": {"path": "token", "expirationSeconds": 3607}},
        {"configMap": {"name": "kube-root-ca.crt", "items": [{"key": "ca.crt",
                                                              "path": "ca.crt"}]}},
        {"downwardAPI": {"items": [{"path": "namespace", "fieldRef": {
            "fieldPath": "metadata.namespace"}}]}}]}}
    files = volumes.volume_files(pod([]), volume, {"kube-root-ca.crt": {"data": {
        "ca.crt": "PEM"}}}, {}, lambda projection: f"tok-{projection['expirationSeconds']}")
    assert files == {"token": b"tok-3607", "ca.crt": b"PEM", "namespace": b"ns"}
    assert volumes.volume_files(pod([]), {"name": "t", "emptyDir": {}}, {}, {},
                                lambda _: "") is None
    assert volumes.volume_files(pod([]), {"name": "h", "persistentVolumeClaim": {
        "claimName": "history"}}, {}, {}, lambda _: "") is None
    with pytest.raises(rules.PodSpecError, match="configMap 'missing'"):
        volumes.volume_files(pod([]), {"name": "c", "configMap": {"name": "missing"}}, {}, {},
                             lambda _: "")
    with pytest.raises(rules.PodSpecError, match="hostPath"):
        volumes.volume_files(pod([]), {"name": "h", "hostPath": {"path": "/"}}, {}, {},
                             lambda _: "")


def test_pod_status_follows_the_process() -> None:
    p = pod([{"name": "w"}])
    p["status"] = {"conditions": [{"type": "PodScheduled", "status": "True",
                                   "lastTransitionTime": "t0"}]}
    state = status.ContainerState(name="w", image="img")
    pending = status.pod_status(p, state, "t1", "t1")
    assert pending["phase"] == "Pending"
    assert pending["containerStatuses"][0]["state"] == {"waiting": {"reason": "ContainerCreating"}}
    state.running_since, state.pid, state.started = "t2", 42, True
    running = status.pod_status(p, state, "t1", "t2")
    ready = {c["type"]: c["status"] for c in running["conditions"]}
    assert running["phase"] == "Running" and ready["Ready"] == "False"
    assert running["conditions"][0]["lastTransitionTime"] == "t0"  # PodScheduled kept
    state.ready = True
    assert {c["type"]: c["status"] for c in status.pod_status(p, state, "t1", "t3")[
        "conditions"]}["Ready"] == "True"
    state.running_since, state.ready, state.pid = None, False, None
    state.restart_count = 3
    state.waiting_reason, state.waiting_message = "CrashLoopBackOff", "back-off 4s"
    state.last_terminated = status.Terminated(1, "Error", "t2", "t4")
    crashed = status.pod_status(p, state, "t1", "t4")
    container = crashed["containerStatuses"][0]
    assert crashed["phase"] == "Running" and container["restartCount"] == 3
    assert container["state"]["waiting"]["reason"] == "CrashLoopBackOff"
    assert container["lastState"]["terminated"]["exitCode"] == 1
    assert status.pod_ip("u-1") == status.pod_ip("u-1") != status.pod_ip("u-2")
    assert status.pod_ip("u-1").startswith("10.245.")


def _slice(ns: str, service: str, endpoints: list[tuple[str, bool]], port: int = 8000) -> dict:
    return {"metadata": {"namespace": ns, "labels": {"kubernetes.io/service-name": service}},
            "ports": [{"name": "http", "port": port}],
            "endpoints": [{"targetRef": {"kind": "Pod", "name": name},
                           "conditions": {"ready": ready}} for name, ready in endpoints]}


def test_proxy_routes_only_ready_runner_endpoints() -> None:
    services = [
        {"metadata": {"namespace": "ns", "name": "svc"},
         "spec": {"selector": {"a": "b"}, "ports": [{"name": "http", "port": 80}]}},
        {"metadata": {"namespace": "default", "name": "kubernetes"},
         "spec": {"ports": [{"name": "https", "port": 443}]}},  # no selector: no URL
    ]
    slices = [_slice("ns", "svc", [("a", True), ("b", False), ("kwok-pod", True)]),
              _slice("ns", "svc", [("c", True)])]
    local = {("ns", "a"): {8000: 5001}, ("ns", "b"): {8000: 5002}, ("ns", "c"): {8000: 5003}}
    fresh = iter([7000, 7001])
    fronts = proxy.frontends(services, slices, {}, lambda: next(fresh),
                             lambda ns, p, port: local.get((ns, p), {}).get(port))
    assert [(f.service, f.local_port, f.servers) for f in fronts] == [
        ("svc", 7000, (("a", 5001), ("c", 5003)))]
    again = proxy.frontends(services, slices, {"ns/svc/http": 7000}, lambda: 9999,
                            lambda ns, p, port: None)
    assert again[0].local_port == 7000 and again[0].servers == ()  # stable port, no servers
    text = proxy.config_text(fronts, health_port=6999)
    assert "bind 127.0.0.1:7000" in text and "server a 127.0.0.1:5001" in text
    assert "5002" not in text and "bind 127.0.0.1:6999" in text


@pytest.mark.skipif(not Path(proxy.BINARY).exists(), reason="Debian's haproxy (make apt)")
def test_haproxy_accepts_the_generated_config(tmp_path: Path) -> None:
    front = proxy.Frontend("ns", "svc", "http", 80, 7000, (("a", 5001),))
    config = tmp_path / "haproxy.cfg"
    config.write_text(proxy.config_text([front], 6999))
    proxy.check(config)


def test_the_health_answer_names_the_configuration() -> None:
    empty = proxy.Frontend("ns", "svc", "http", 80, 7000, ())
    full = proxy.Frontend("ns", "svc", "http", 80, 7000, (("a", 5001),))
    answers = {proxy.health_answer(proxy.config_text(fronts, 6999))
               for fronts in ([], [empty], [full])}
    assert len(answers) == 3 and all(a.startswith("ok ") for a in answers)
    # the health port is not part of what it names: the same servers answer the same
    assert proxy.health_answer(proxy.config_text([full], 6998)) == proxy.health_answer(
        proxy.config_text([full], 6999))


class _Ok(http.server.BaseHTTPRequestHandler):
    def do_GET(self) -> None:  # noqa: N802 (the stdlib's name)
        self._ok()

    def do_POST(self) -> None:  # noqa: N802
        self.rfile.read(int(self.headers.get("Content-Length", 0)))
        self._ok()

    def _ok(self) -> None:
        self.send_response(200)
        self.send_header("Content-Length", "2")
        self.end_headers()
        self.wfile.write(b"ok")

    def log_message(self, *args: object) -> None:
        pass


@pytest.fixture
def live_server() -> Iterator[int]:
    """A local HTTP server answering 200 to everything; yields its port."""
    live = http.server.ThreadingHTTPServer(("127.0.0.1", 0), _Ok)
    threading.Thread(target=live.serve_forever, daemon=True).start()
    yield live.server_address[1]
    live.shutdown()


@contextlib.contextmanager
def haproxy(tmp_path: Path, fronts: list[proxy.Frontend],
            health: int) -> Iterator[tuple[Path, Path]]:
    """HAProxy in master-worker mode on ``fronts``, serving once this enters; yields
    (config, pidfile) for reloads."""
    config, pidfile = tmp_path / "haproxy.cfg", tmp_path / "haproxy.pid"
    text = proxy.config_text(fronts, health)
    config.write_text(text)
    running = subprocess.Popen(proxy.argv(config, pidfile), stdout=subprocess.DEVNULL,
                               stderr=subprocess.DEVNULL)
    try:
        proxy.wait_serving(health, proxy.health_answer(text), timeout=10)
        yield config, pidfile
    finally:
        running.terminate()
        running.wait(timeout=10)


@pytest.mark.skipif(not Path(proxy.BINARY).exists(), reason="Debian's haproxy (make apt)")
def test_a_reload_returns_only_once_the_new_servers_take_requests(
        tmp_path: Path, live_server: int) -> None:
    """The runner publishes "this Service has a server" right after ``reload``; a client that
    reads that and sends at once must not land in the old worker's empty backend (HAProxy
    reloads asynchronously: without the wait, 90-170 of ~900 requests in the first 0.5 s
    got 503 here, and a tuner test in CI 83)."""
    from specd_dev.cluster import processes

    front_port, health = processes.free_ports(2)
    empty = proxy.Frontend("ns", "svc", "http", 80, front_port, ())
    full = proxy.Frontend("ns", "svc", "http", 80, front_port, (("live", live_server),))
    with haproxy(tmp_path, [empty], health) as (config, pidfile):
        for _ in range(3):
            proxy.reload(config, proxy.config_text([full], health), pidfile, health)
            codes = []
            started = time.monotonic()
            while time.monotonic() - started < 0.3:
                try:
                    with urllib.request.urlopen(f"http://127.0.0.1:{front_port}/",
                                                timeout=10) as response:
                        codes.append(response.status)
                except urllib.error.HTTPError as exc:
                    codes.append(exc.code)
            assert codes and set(codes) == {200}, f"{codes.count(503)} of {len(codes)} got 503"
            proxy.reload(config, proxy.config_text([empty], health), pidfile, health)


@pytest.mark.skipif(not Path(proxy.BINARY).exists(), reason="Debian's haproxy (make apt)")
def test_a_refused_connection_is_redispatched_to_a_live_server(
        tmp_path: Path, live_server: int) -> None:
    """A server that stopped before its endpoint was dropped costs no request: HAProxy retries
    the connection on the other server (round robin sends every other request to it)."""
    from specd_dev.cluster import processes

    dead, front_port, health = processes.free_ports(3)  # nothing listens on ``dead``
    front = proxy.Frontend("ns", "svc", "http", 80, front_port,
                           (("gone", dead), ("live", live_server)))
    with haproxy(tmp_path, [front], health):
        url = f"http://127.0.0.1:{front_port}/v1/chat/completions"
        codes = []
        for _ in range(10):
            with urllib.request.urlopen(urllib.request.Request(url, data=b"{}"),
                                        timeout=10) as response:
                codes.append(response.status)
        assert codes == [200] * 10


def test_targets_carry_kubernetes_sd_labels_and_the_jobs_agree() -> None:
    p = pod([{"name": "worker", "ports": [{"name": "http", "containerPort": 8000}]}])
    p["metadata"]["annotations"] = {"prometheus.io/scrape": "true", "prometheus.io/port": "8000"}
    p["metadata"]["ownerReferences"] = [{"kind": "ReplicaSet", "name": "rs"}]
    p["status"] = {"podIP": "10.245.0.9", "phase": "Running"}
    (group,) = discovery.target_groups([(p, {8000: 41000}, True)])
    assert group["targets"] == ["127.0.0.1:41000"]
    labels = group["labels"]
    assert labels["__meta_kubernetes_pod_label_serving_specd_io_track"] == "stable"
    assert labels["__meta_kubernetes_pod_annotation_prometheus_io_port"] == "8000"
    assert labels["__meta_kubernetes_pod_container_port_number"] == "8000"
    assert labels["__meta_kubernetes_pod_controller_kind"] == "ReplicaSet"
    local = discovery.local_scrape_config("targets.json")["scrape_configs"][0]
    production = discovery.production_scrape_config()
    # the same relabelling, but for how the address is found
    assert [r for r in local["relabel_configs"] if r is not discovery.LOCAL_ADDRESS] == [
        r for r in production["relabel_configs"] if r is not discovery.PRODUCTION_ADDRESS]


def test_admission_reserves_memory_as_the_scheduler_counts_it() -> None:
    gib = 2**30
    serve = {"command": ["specd", "serve"]}
    assert admission.reservation(serve) == admission.WORKER_RSS_BYTES
    assert admission.reservation({"command": ["specd", "operator"]}) == admission.LIGHT_RSS_BYTES
    assert admission.reservation({**serve, "resources": {"limits": {"memory": "3Gi"}}}) == 3 * gib
    assert admission.reservation({**serve, "resources": {"requests": {"memory": "1Gi"},
                                                         "limits": {"memory": "3Gi"}}}) == gib
    capacity = admission.Capacity.from_available(10 * gib)  # 8 GiB budget
    assert admission.refusal(capacity, {}, 3 * gib) is None
    assert admission.refusal(capacity, {"a": 3 * gib, "b": 3 * gib}, 2 * gib) is None
    why = admission.refusal(capacity, {"a": 3 * gib, "b": 3 * gib}, 3 * gib)
    assert why and "needs 3.0 GiB" in why and "2.0 of the runner's 8.0 GiB" in why
    assert admission.refusal(capacity, {}, 9 * gib)  # never fits: said, not started
    counted = admission.Capacity.from_available(100 * gib, max_processes=2)
    assert admission.refusal(counted, {"a": 1, "b": 1}, 1) == (
        "the pod runner runs at most 2 processes (--max-processes) and 2 are running")


def test_the_documented_production_job_is_the_codes() -> None:
    text = (ROOT / "docs" / "prometheus.md").read_text()
    block = text.split("production_scrape_config() -->\n```yaml\n", 1)[1].split("```", 1)[0]
    assert yaml.safe_load(block) == {"scrape_configs": [discovery.production_scrape_config()]}


def test_proxy_falls_back_to_serving_terminating_endpoints_like_kube_proxy() -> None:
    services = [{"metadata": {"namespace": "ns", "name": "svc"},
                 "spec": {"selector": {"a": "b"}, "ports": [{"name": "http", "port": 80}]}}]
    local = {"old": 5001, "new": 5002, "gone": 5003}

    def servers(conditions: dict[str, dict]) -> tuple:
        endpoint_slice = {
            "metadata": {"namespace": "ns", "labels": {"kubernetes.io/service-name": "svc"}},
            "ports": [{"name": "http", "port": 8000}],
            "endpoints": [{"targetRef": {"kind": "Pod", "name": name}, "conditions": c}
                          for name, c in conditions.items()]}
        (front,) = proxy.frontends(services, [endpoint_slice], {}, lambda: 7000,
                                   lambda ns, pod, port: local.get(pod))
        return front.servers

    draining = {"ready": False, "serving": True, "terminating": True}
    stopped = {"ready": False, "serving": False, "terminating": True}
    # a Ready endpoint takes all the traffic; the terminating one gets none
    assert servers({"old": draining, "new": {"ready": True}}) == (("new", 5002),)
    # nothing Ready (a one-replica Deployment rolling over): the still-serving one keeps it
    assert servers({"old": draining, "gone": stopped, "new": {"ready": False}}) == (
        ("old", 5001),)
    assert servers({"gone": stopped}) == ()


def test_prestop_sleep_is_the_only_hook_the_runner_runs() -> None:
    assert rules.prestop_sleep({"name": "w"}) == 0
    assert rules.prestop_sleep({"lifecycle": {"preStop": {"sleep": {"seconds": 5}}}}) == 5
    with pytest.raises(rules.PodSpecError, match="exec hooks are not supported"):
        rules.prestop_sleep({"lifecycle": {"preStop": {"exec": {"command": ["sleep", "5"]}}}})


def test_port_leases_never_hand_one_port_to_two_holders() -> None:
    """CI 46: two pods starting together got the same port from ``free_ports`` (closed before
    it returns); the second process could not bind it and both pods answered from the first."""
    from specd_dev.cluster.processes import PortLeases

    picks = iter([5001, 5001, 5002, 5001, 5002, 5003, 5001, 5004])  # the kernel repeating itself
    leases = PortLeases(pick=lambda: next(picks))
    assert leases.lease("pod-a", 1) == [5001]
    assert leases.lease("pod-b", 1) == [5002]  # 5001 again is skipped: pod-a holds it
    leases.hold("services", [5003])
    assert leases.lease("pod-c", 1) == [5001 + 3]  # 5001, 5002, 5003 held: 5004
    leases.release("pod-a")
    picks = iter([5002, 5001])
    assert leases.lease("pod-d", 1) == [5001]  # released by pod-a, free again
    leases.hold("services", [])
    picks = iter([5003])
    assert leases.lease("pod-e", 1) == [5003]  # the Service that held it went away
