"""Start, check and stop a local Kubernetes control plane made of real binaries.

We start the processes directly (etcd, kube-apiserver, kube-controller-manager,
kube-scheduler, and the kwok controller faking the nodes) rather than through ``kwokctl``:
every flag, port, certificate and log is ours, nothing is ever downloaded, readiness is checked
per component (so a failure names the component and its log), and teardown knows each pid.

State lives in one directory (default ``~/.cache/specd/clusters/<name>``)::

    state.json      ports, pids (with start times), paths: written once everything is ready
    kubeconfig      admin credentials (group system:masters) for https://127.0.0.1:<port>
    pki/ etcd/      certificates, etcd data (removed by ``down``)
    logs/<component>.log
"""

from __future__ import annotations

import base64
import json
import shutil
import ssl
import time
import urllib.error
import urllib.request
from collections.abc import Callable
from dataclasses import asdict, dataclass, field
from importlib import resources
from pathlib import Path

import yaml

from specd import SpecdError
from specd_dev.cluster import build, pki, processes
from specd_dev.cluster.handle import LocalCluster
from specd_dev.cluster.processes import LOOPBACK, Started

Progress = Callable[[str], None]

CONTROL_PLANE = ("etcd", "kube-apiserver", "kube-controller-manager", "kube-scheduler", "kwok")
# Development tooling beside the control plane: the pod runner runs specd's own pods as
# local processes, HAProxy puts Services on loopback URLs, Prometheus scrapes the pods.
ADDONS = ("proxy", "prometheus", "pod-runner")
COMPONENTS = CONTROL_PLANE + ADDONS
SERVICE_CIDR = "10.96.0.0/16"
POD_CIDR = "10.244.0.1/16"
FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
DEFAULT_NAME = "specd"


@dataclass(frozen=True)
class NodeShape:
    """What every fake node advertises (capacity == allocatable)."""

    count: int = 2
    cpu: str = "32"
    memory: str = "256Gi"
    gpus: int = 8
    pods: int = 110


@dataclass
class Ports:
    etcd_client: int
    etcd_peer: int
    apiserver: int
    controller_manager: int
    scheduler: int
    kwok: int
    proxy: int  # HAProxy's own health frontend
    prometheus: int
    runner: int  # the pod runner's /healthz

    @classmethod
    def pick(cls) -> Ports:
        return cls(*processes.free_ports(9))


@dataclass
class State:
    name: str
    bin_dir: str
    ports: Ports
    processes: list[Started] = field(default_factory=list)
    nodes: list[str] = field(default_factory=list)

    def dump(self) -> str:
        return json.dumps(asdict(self), indent=2)

    @classmethod
    def load(cls, text: str) -> State:
        raw = json.loads(text)
        return cls(name=raw["name"], bin_dir=raw["bin_dir"], ports=Ports(**raw["ports"]),
                   processes=[Started(**p) for p in raw["processes"]], nodes=raw["nodes"])


class ComponentFailed(SpecdError):
    """A component exited or did not become ready: names it and its log."""

    def __init__(self, component: str, reason: str, log: str | Path) -> None:
        tail = processes.log_tail(log)
        super().__init__(f"{component} {reason}; log: {log}" + (f"\n{tail}" if tail else ""))
        self.component = component
        self.log = str(log)


def default_state_dir(name: str = DEFAULT_NAME) -> Path:
    return build.cache_root() / "clusters" / name


def _print(line: str) -> None:
    print(line, flush=True)


# --- pure argument builders -------------------------------------------------------------

def etcd_args(data_dir: Path, ports: Ports) -> list[str]:
    client, peer = f"http://{LOOPBACK}:{ports.etcd_client}", f"http://{LOOPBACK}:{ports.etcd_peer}"
    return [
        "--name=default", f"--data-dir={data_dir}",
        f"--listen-client-urls={client}", f"--advertise-client-urls={client}",
        f"--listen-peer-urls={peer}", f"--initial-advertise-peer-urls={peer}",
        f"--initial-cluster=default={peer}",
        # a throw-away test store: skip fsync, keep it small
        "--unsafe-no-fsync=true", "--quota-backend-bytes=1073741824",
        "--log-level=warn",
    ]


def apiserver_args(keys: pki.Pki, ports: Ports) -> list[str]:
    return [
        f"--etcd-servers=http://{LOOPBACK}:{ports.etcd_client}",
        f"--bind-address={LOOPBACK}", f"--secure-port={ports.apiserver}",
        f"--tls-cert-file={keys.server_cert}", f"--tls-private-key-file={keys.server_key}",
        f"--client-ca-file={keys.ca_cert}",
        "--service-account-issuer=https://kubernetes.default.svc.cluster.local",
        f"--service-account-key-file={keys.sa_pub}",
        f"--service-account-signing-key-file={keys.sa_key}",
        f"--service-cluster-ip-range={SERVICE_CIDR}",
        "--authorization-mode=RBAC",  # so least-privilege RBAC in charts is really checked
        "--allow-privileged=false",
        "--profiling=false",
        "--event-ttl=1h",
    ]


def _component_common(kubeconfig: Path, port: int) -> list[str]:
    return [
        f"--kubeconfig={kubeconfig}", f"--authentication-kubeconfig={kubeconfig}",
        f"--authorization-kubeconfig={kubeconfig}",
        f"--bind-address={LOOPBACK}", f"--secure-port={port}",
        "--leader-elect=false", "--profiling=false",
    ]


def controller_manager_args(keys: pki.Pki, kubeconfig: Path, ports: Ports) -> list[str]:
    return [
        *_component_common(kubeconfig, ports.controller_manager),
        f"--service-account-private-key-file={keys.sa_key}",
        f"--root-ca-file={keys.ca_cert}",
        "--kube-api-qps=100", "--kube-api-burst=200",
    ]


def scheduler_args(kubeconfig: Path, ports: Ports) -> list[str]:
    return _component_common(kubeconfig, ports.scheduler)


def kwok_args(kubeconfig: Path, stages: Path, ports: Ports) -> list[str]:
    return [
        f"--kubeconfig={kubeconfig}", f"--config={stages}",
        "--manage-all-nodes=false",
        f"--manage-nodes-with-annotation-selector={FAKE_NODE_ANNOTATION}=fake",
        f"--node-ip={LOOPBACK}", f"--server-address={LOOPBACK}:{ports.kwok}",
        f"--cidr={POD_CIDR}", "--node-lease-duration-seconds=40",
    ]


def kubeconfig_yaml(keys: pki.Pki, server: str, name: str) -> str:
    def b64(path: Path) -> str:
        return base64.b64encode(path.read_bytes()).decode()

    config = {
        "apiVersion": "v1", "kind": "Config", "current-context": name, "preferences": {},
        "clusters": [{"name": name, "cluster": {
            "server": server, "certificate-authority-data": b64(keys.ca_cert)}}],
        "users": [{"name": f"{name}-admin", "user": {
            "client-certificate-data": b64(keys.admin_cert),
            "client-key-data": b64(keys.admin_key)}}],
        "contexts": [{"name": name, "context": {"cluster": name, "user": f"{name}-admin"}}],
    }
    return yaml.safe_dump(config, sort_keys=False)


def fake_node(name: str, shape: NodeShape) -> dict:
    resources_ = {"cpu": shape.cpu, "memory": shape.memory, "pods": str(shape.pods),
                  "ephemeral-storage": "1Ti", "nvidia.com/gpu": str(shape.gpus)}
    return {
        "apiVersion": "v1", "kind": "Node",
        "metadata": {
            "name": name,
            "annotations": {FAKE_NODE_ANNOTATION: "fake", "node.alpha.kubernetes.io/ttl": "0"},
            "labels": {"kubernetes.io/hostname": name, "kubernetes.io/os": "linux",
                       "kubernetes.io/arch": "amd64", "type": "kwok",
                       "nvidia.com/gpu.present": "true"},
        },
        "spec": {},
        "status": {"capacity": resources_, "allocatable": dict(resources_)},
    }


# --- health checks ----------------------------------------------------------------------

def _get(url: str, context: ssl.SSLContext | None = None, timeout: float = 2.0) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(url, timeout=timeout, context=context) as response:
            return response.status, response.read().decode(errors="replace")
    except urllib.error.HTTPError as exc:
        return exc.code, exc.read().decode(errors="replace")
    except (OSError, ValueError):
        return 0, ""


def _admin_tls(keys: pki.Pki) -> ssl.SSLContext:
    context = ssl.create_default_context(cafile=str(keys.ca_cert))
    context.load_cert_chain(str(keys.admin_cert), str(keys.admin_key))
    return context


def _self_signed_tls() -> ssl.SSLContext:
    """Controller-manager and scheduler serve /healthz with their own self-signed certificate."""
    context = ssl.create_default_context()
    context.check_hostname = False
    context.verify_mode = ssl.CERT_NONE
    return context


def health_urls(ports: Ports) -> dict[str, str]:
    return {
        "etcd": f"http://{LOOPBACK}:{ports.etcd_client}/health",
        "kube-apiserver": f"https://{LOOPBACK}:{ports.apiserver}/readyz",
        "kube-controller-manager": f"https://{LOOPBACK}:{ports.controller_manager}/healthz",
        "kube-scheduler": f"https://{LOOPBACK}:{ports.scheduler}/healthz",
        "kwok": f"http://{LOOPBACK}:{ports.kwok}/healthz",
        "proxy": f"http://{LOOPBACK}:{ports.proxy}/",
        "prometheus": f"http://{LOOPBACK}:{ports.prometheus}/-/ready",
        "pod-runner": f"http://{LOOPBACK}:{ports.runner}/healthz",
    }


def _healthy(component: str, url: str, keys: pki.Pki) -> bool:
    context = None
    if url.startswith("https"):
        context = _admin_tls(keys) if component == "kube-apiserver" else _self_signed_tls()
    code, body = _get(url, context)
    if component == "etcd":
        return code == 200 and '"health":"true"' in body.replace(" ", "")
    return code == 200


def _wait_ready(started: Started, url: str, keys: pki.Pki, deadline: float) -> None:
    while True:
        if not processes.is_alive(started.pid, started.start_ticks):
            raise ComponentFailed(started.name, "exited before becoming ready", started.log)
        if _healthy(started.name, url, keys):
            return
        if time.monotonic() > deadline:
            raise ComponentFailed(started.name, f"was not ready in time ({url})", started.log)
        time.sleep(0.2)


# --- lifecycle --------------------------------------------------------------------------

def _state_file(state_dir: Path) -> Path:
    return state_dir / "state.json"


def read_state(state_dir: Path) -> State | None:
    try:
        return State.load(_state_file(state_dir).read_text())
    except (OSError, ValueError, KeyError, TypeError):
        return None


def handle_for(state_dir: Path, state: State) -> LocalCluster:
    return LocalCluster(name=state.name, state_dir=state_dir,
                        kubeconfig=state_dir / "kubeconfig", bin_dir=Path(state.bin_dir),
                        server=f"https://{LOOPBACK}:{state.ports.apiserver}")


def status(state_dir: Path) -> dict[str, str]:
    """Component name -> 'ready' | 'running, not ready' | 'not running'; empty if never up."""
    state = read_state(state_dir)
    if state is None:
        return {}
    keys = pki.load(state_dir / "pki")
    urls = health_urls(state.ports)
    report = {}
    for started in state.processes:
        if not processes.is_alive(started.pid, started.start_ticks):
            report[started.name] = "not running"
        elif _healthy(started.name, urls[started.name], keys):
            report[started.name] = "ready"
        else:
            report[started.name] = "running, not ready"
    return report


def is_up(state_dir: Path) -> bool:
    report = status(state_dir)
    return bool(report) and set(report) == set(COMPONENTS) and all(
        value == "ready" for value in report.values())


def running_cluster(name: str = DEFAULT_NAME) -> LocalCluster:
    """The running local cluster ``name`` (for benchmarks that use one started by
    ``specd cluster up``); SystemExit saying how to start it otherwise."""
    state_dir = default_state_dir(name)
    state = read_state(state_dir)
    if state is None or not is_up(state_dir):
        raise SystemExit(f"cluster '{name}' is not running: specd cluster up")
    return handle_for(state_dir, state)


def up(state_dir: Path | None = None, *, name: str = DEFAULT_NAME, shape: NodeShape = NodeShape(),
       timeout: float = 120.0, ports: Ports | None = None,
       progress: Progress = _print) -> LocalCluster:
    """Start the cluster (building the binaries first if the cache is empty) and wait until
    every component is ready, the fake nodes are Ready and pods can be created. Idempotent:
    a healthy running cluster is returned as is; a half-dead one is torn down and restarted.
    ``ports`` defaults to free loopback ports picked now."""
    state_dir = Path(state_dir or default_state_dir(name))
    existing = read_state(state_dir)
    if existing is not None:
        if is_up(state_dir):
            progress(f"cluster '{existing.name}' is already up ({state_dir / 'kubeconfig'})")
            return handle_for(state_dir, existing)
        progress(f"cluster '{existing.name}' is not healthy; restarting it")
        down(state_dir, progress=progress)
    bin_dir = build.build(progress=progress)
    started_at = time.monotonic()
    deadline = started_at + timeout
    state = State(name=name, bin_dir=str(bin_dir), ports=ports or Ports.pick())
    try:
        _start_all(state_dir, state, shape, deadline, progress)
    except BaseException:
        _stop_all(state.processes)
        _state_file(state_dir).unlink(missing_ok=True)
        raise
    _state_file(state_dir).write_text(state.dump())
    progress(f"cluster '{name}' is up in {time.monotonic() - started_at:.1f}s: "
             f"{len(state.nodes)} fake GPU nodes, kubeconfig {state_dir / 'kubeconfig'}")
    return handle_for(state_dir, state)


def _start_all(state_dir: Path, state: State, shape: NodeShape, deadline: float,
               progress: Progress) -> None:
    for sub in ("etcd", "pki"):
        shutil.rmtree(state_dir / sub, ignore_errors=True)
    (state_dir / "logs").mkdir(parents=True, exist_ok=True)
    keys = pki.generate(state_dir / "pki")
    kubeconfig = state_dir / "kubeconfig"
    server = f"https://{LOOPBACK}:{state.ports.apiserver}"
    kubeconfig.write_text(kubeconfig_yaml(keys, server, state.name))
    kubeconfig.chmod(0o600)
    stages = state_dir / "kwok-stages.yaml"
    stages.write_text(resources.files("specd_dev.cluster").joinpath(
        "stages/kwok-stages.yaml").read_text())
    ports, bins = state.ports, Path(state.bin_dir)
    plan = [
        ("etcd", etcd_args(state_dir / "etcd", ports)),
        ("kube-apiserver", apiserver_args(keys, ports)),
        ("kube-controller-manager", controller_manager_args(keys, kubeconfig, ports)),
        ("kube-scheduler", scheduler_args(kubeconfig, ports)),
        ("kwok", kwok_args(kubeconfig, stages, ports)),
    ]
    urls = health_urls(ports)
    for component, args in plan:
        _, started = processes.start(component, [str(bins / component), *args],
                                     state_dir / "logs" / f"{component}.log", cwd=state_dir)
        state.processes.append(started)
        _wait_ready(started, urls[component], keys, deadline)
        progress(f"  {component} ready (port {urls[component].rsplit(':', 1)[1].split('/')[0]})")
    handle = handle_for(state_dir, state)
    state.nodes = _create_nodes(handle, shape)
    _wait_usable(handle, state, deadline)
    progress(f"  {len(state.nodes)} fake nodes Ready "
             f"(cpu {shape.cpu}, memory {shape.memory}, nvidia.com/gpu {shape.gpus} each)")
    for component, argv in addon_plan(state_dir, ports):
        _, started = processes.start(component, argv,
                                     state_dir / "logs" / f"{component}.log", cwd=state_dir)
        state.processes.append(started)
        _wait_ready(started, urls[component], keys, deadline)
        progress(f"  {component} ready (port {urls[component].rsplit(':', 1)[1].split('/')[0]})")


def addon_plan(state_dir: Path, ports: Ports) -> list[tuple[str, list[str]]]:
    """HAProxy (master-worker, reloaded by the runner), Prometheus (file_sd of the runner's
    pods) and the pod runner; writes their starting configuration."""
    import sys

    from specd_dev.cluster.prometheus import DEFAULT_BINARY, server_argv
    from specd_dev.cluster.runner import discovery, proxy

    addons = state_dir / "addons"
    shutil.rmtree(addons, ignore_errors=True)
    addons.mkdir(parents=True)
    haproxy_cfg, pidfile = addons / "haproxy.cfg", addons / "haproxy.pid"
    haproxy_cfg.write_text(proxy.config_text([], ports.proxy))
    targets = addons / "pod-targets.json"
    targets.write_text("[]\n")
    prometheus_cfg = addons / "prometheus.yml"
    prometheus_cfg.write_text(discovery.local_config_yaml(str(targets)))
    for binary, package in ((proxy.BINARY, "haproxy"), (DEFAULT_BINARY, "prometheus")):
        if not Path(binary).is_file():
            raise SpecdError(f"{binary} not found: install Debian's '{package}' package "
                             "(make apt)")
    return [
        ("proxy", proxy.argv(haproxy_cfg, pidfile)),
        ("prometheus", server_argv(DEFAULT_BINARY, prometheus_cfg, addons / "prometheus-data",
                                   ports.prometheus)),
        ("pod-runner", [sys.executable, "-m", "specd_dev.cluster.runner",
                        f"--state-dir={state_dir}", f"--kubeconfig={state_dir / 'kubeconfig'}",
                        f"--haproxy-config={haproxy_cfg}", f"--haproxy-pidfile={pidfile}",
                        f"--proxy-health-port={ports.proxy}", f"--targets-file={targets}",
                        f"--health-port={ports.runner}"]),
    ]


def _create_nodes(handle: LocalCluster, shape: NodeShape) -> list[str]:
    from kubernetes import client

    api = client.CoreV1Api(handle.api_client())
    names = [f"specd-gpu-{index}" for index in range(shape.count)]
    for name in names:
        api.create_node(fake_node(name, shape))
    return names


def _wait_usable(handle: LocalCluster, state: State, deadline: float) -> None:
    """Nodes Ready (kwok initialised them) and the default ServiceAccount exists (pods can be
    admitted). Blames kwok or the controller-manager, with their logs, on timeout."""
    from kubernetes import client
    from kubernetes.client.rest import ApiException

    api = client.CoreV1Api(handle.api_client())
    logs = {p.name: p.log for p in state.processes}
    while True:
        ready = {
            node.metadata.name for node in api.list_node().items
            if any(c.type == "Ready" and c.status == "True" for c in node.status.conditions or [])
        }
        if set(state.nodes) <= ready:
            break
        if time.monotonic() > deadline:
            raise ComponentFailed("kwok", f"did not make nodes Ready in time (ready: "
                                  f"{sorted(ready)})", logs["kwok"])
        time.sleep(0.2)
    while True:
        try:
            api.read_namespaced_service_account("default", "default")
            return
        except ApiException as exc:
            if exc.status != 404:
                raise
        if time.monotonic() > deadline:
            raise ComponentFailed("kube-controller-manager",
                                  "did not create the default ServiceAccount in time",
                                  logs["kube-controller-manager"])
        time.sleep(0.2)


def _stop_all(started: list[Started]) -> None:
    # the runner first (it stops its pods' processes: up to 10 s grace each, in parallel),
    # then the proxy and Prometheus, then kwok ... etcd last
    for process in reversed(started):
        processes.stop(process, timeout=40.0 if process.name == "pod-runner" else 10.0)
        if process.name == "pod-runner":
            _kill_runner_orphans(Path(process.log).parent.parent)


def _kill_runner_orphans(state_dir: Path) -> None:
    """Pod processes a SIGKILLed runner could not stop (recognised by pid and start time)."""
    import os
    import signal

    from specd_dev.cluster.runner import state as runner_state

    published = runner_state.read(state_dir)
    left = [(p["pid"], p["start_ticks"]) for p in (published.pods if published else [])
            if p.get("pid") and processes.is_alive(p["pid"], p["start_ticks"])]
    for pid, _ in left:
        try:
            os.killpg(pid, signal.SIGKILL)
        except (ProcessLookupError, PermissionError):
            pass
    deadline = time.monotonic() + 5.0
    while time.monotonic() < deadline and any(processes.is_alive(*p) for p in left):
        time.sleep(0.05)


def down(state_dir: Path | None = None, *, name: str = DEFAULT_NAME,
         progress: Progress = _print) -> bool:
    """Stop every component, check its ports are free, remove data and credentials (logs stay).
    Returns False when there was nothing to stop."""
    state_dir = Path(state_dir or default_state_dir(name))
    state = read_state(state_dir)
    if state is None:
        return False
    _stop_all(state.processes)
    left = [p.name for p in state.processes if processes.is_alive(p.pid, p.start_ticks)]
    if left:
        raise SpecdError(f"could not stop {', '.join(left)} (see {state_dir / 'logs'})")
    busy = [port for port in asdict(state.ports).values() if not _wait_port_free(port)]
    for sub in ("etcd", "pki", "helm", "service-accounts", "addons", "runner"):
        shutil.rmtree(state_dir / sub, ignore_errors=True)
    for leftover in ("kubeconfig", "kwok-stages.yaml", "state.json"):
        (state_dir / leftover).unlink(missing_ok=True)
    if busy:
        raise SpecdError(f"ports still in use after stopping the cluster: {busy}")
    progress(f"cluster '{state.name}' stopped (logs kept in {state_dir / 'logs'})")
    return True


def _wait_port_free(port: int, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while not processes.port_is_free(port):
        if time.monotonic() > deadline:
            return False
        time.sleep(0.1)
    return True
