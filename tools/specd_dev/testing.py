"""Helpers for tests and benchmarks that run the real operator against a real cluster.

- ``install_crd(cluster)``: apply crds/ and wait until the API serves the kind.
- ``operator_kubeconfig(cluster, path)``: apply deploy/rbac.yaml and write a kubeconfig for
  the operator's ServiceAccount (a TokenRequest token), so the operator runs with exactly
  its least-privilege rights, not as admin.
- ``OperatorProcess``: ``specd operator`` as a subprocess (health/metrics on free loopback
  ports, log to a file), killable and restartable.
- ``operator_for_namespace(cluster, workdir, prefix)``: all of the above for a fresh
  namespace: yields ``(namespace, operator)``, stops the operator and deletes the namespace.
- ``Traffic(url)``: a bounded closed loop of requests through a Service URL (a context
  manager), counting requests and failures.

``cluster`` is a ``specd_dev.cluster.handle.LocalCluster`` (see specd_dev.cluster.pytest_plugin).
"""

from __future__ import annotations

import contextlib
import json
import os
import random
import signal
import socket
import statistics
import subprocess
import sys
import threading
import time
import urllib.request
import uuid
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import yaml

from specd.api import k8s
from specd.operator import manifests
from specd_dev.cluster.handle import wait_for

REPO = Path(__file__).resolve().parents[2]
CRD_FILE = REPO / "crds" / "speculativeservice.yaml"
RBAC_FILE = REPO / "deploy" / "rbac.yaml"
OPERATOR_NAMESPACE = "specd-system"
OPERATOR_ACCOUNT = "specd-operator"


def install_crd(cluster: Any) -> None:
    cluster.kubectl("apply", "--server-side", "--force-conflicts", "-f", str(CRD_FILE))
    # `kubectl wait` right after the first apply on a fresh API server can miss the object:
    # poll the condition instead.
    crd = f"crd/{k8s.PLURAL}.{k8s.GROUP}"
    deadline = time.monotonic() + 60
    while True:
        out = cluster.kubectl("get", crd, "-o",
                              "jsonpath={.status.conditions[?(@.type=='Established')].status}",
                              check=False)
        if out.returncode == 0 and out.stdout.strip() == "True":
            break
        if time.monotonic() > deadline:
            raise TimeoutError(f"{crd} not Established: {out.stdout}{out.stderr}")
        time.sleep(0.3)
    # Established can precede discovery by a moment; wait until the kind is listable.
    deadline = time.monotonic() + 30
    while cluster.kubectl("get", k8s.SHORT_NAME, "-A", check=False).returncode != 0:
        if time.monotonic() > deadline:
            raise TimeoutError("the SpeculativeService kind is not served")
        time.sleep(0.3)


def operator_kubeconfig(cluster: Any, path: Path, duration: str = "6h") -> Path:
    """A kubeconfig holding only the operator ServiceAccount's token."""
    cluster.kubectl("apply", "-f", str(RBAC_FILE))
    token = cluster.kubectl("create", "token", OPERATOR_ACCOUNT, "-n", OPERATOR_NAMESPACE,
                            f"--duration={duration}").stdout.strip()
    admin = yaml.safe_load(Path(cluster.kubeconfig).read_text())
    cluster_entry = admin["clusters"][0]["cluster"]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "local", "cluster": cluster_entry}],
        "users": [{"name": OPERATOR_ACCOUNT, "user": {"token": token}}],
        "contexts": [{"name": "operator",
                      "context": {"cluster": "local", "user": OPERATOR_ACCOUNT}}],
        "current-context": "operator",
    }
    path.write_text(yaml.safe_dump(config))
    path.chmod(0o600)
    return path


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        return int(sock.getsockname()[1])


@contextlib.contextmanager
def operator_for_namespace(cluster: Any, workdir: Path, prefix: str,
                           extra: tuple[str, ...] = ()) -> Iterator[tuple[str, OperatorProcess]]:
    """A fresh namespace watched by a least-privilege ``specd operator``."""
    from kubernetes import client

    install_crd(cluster)
    workdir.mkdir(parents=True, exist_ok=True)
    kubeconfig = operator_kubeconfig(cluster, workdir / "kubeconfig")
    namespace = f"{prefix}-{uuid.uuid4().hex[:8]}"
    core = client.CoreV1Api(cluster.api_client())
    core.create_namespace({"metadata": {"name": namespace}})
    # the probes reach pods through the runner's loopback ports
    extra = ("--pod-address-map", str(cluster.pod_address_map), *extra)
    operator = OperatorProcess(kubeconfig, workdir / "operator.log", namespaces=(namespace,),
                               extra=extra)
    try:
        yield namespace, operator.start()
    finally:
        operator.stop()
        core.delete_namespace(namespace)


class OperatorProcess:
    """`specd operator` in a subprocess, bound to loopback."""

    def __init__(self, kubeconfig: Path, log_path: Path, namespaces: tuple[str, ...] = (),
                 extra: tuple[str, ...] = ()) -> None:
        self.kubeconfig = kubeconfig
        self.log_path = log_path
        self.namespaces = namespaces
        self.extra = extra
        self.process: subprocess.Popen[bytes] | None = None
        self.health_port = self.metrics_port = 0
        # each operator its own SQLite history, beside its log (kept across restarts)
        self.history_url = f"sqlite:///{log_path.with_name(log_path.stem + '-history.db')}"

    def start(self, timeout: float = 60.0) -> OperatorProcess:
        self.health_port, self.metrics_port = free_port(), free_port()
        cmd = [sys.executable, "-m", "specd.operator", "--kubeconfig",
               str(self.kubeconfig), "--bind", "127.0.0.1",
               "--health-port", str(self.health_port), "--metrics-port", str(self.metrics_port),
               *[arg for ns in self.namespaces for arg in ("--namespace", ns)],
               "--history-url", self.history_url, *self.extra]
        log = open(self.log_path, "ab")  # noqa: SIM115 - owned by the child's lifetime
        env = {k: v for k, v in os.environ.items() if k != "KUBECONFIG"}
        self.process = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env)
        log.close()
        deadline = time.monotonic() + timeout
        while not self.healthy():
            if self.process.poll() is not None:
                raise RuntimeError(f"operator exited with {self.process.returncode}:\n"
                                   + self.log_tail())
            if time.monotonic() > deadline:
                raise TimeoutError("operator not healthy in time:\n" + self.log_tail())
            time.sleep(0.2)
        return self

    def _get(self, port: int, path: str) -> str:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=2) as response:
            return response.read().decode()

    def healthy(self) -> bool:
        try:
            self._get(self.health_port, "/healthz")
            return True
        except OSError:
            return False

    def metrics(self) -> str:
        return self._get(self.metrics_port, "/metrics")

    def health(self) -> str:
        return self._get(self.health_port, "/healthz")

    def rss_bytes(self) -> int:
        import psutil

        assert self.process is not None
        return int(psutil.Process(self.process.pid).memory_info().rss)

    def kill(self) -> None:
        """SIGKILL: no cleanup, as a crash or an evicted pod."""
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGKILL)
            self.process.wait(timeout=10)

    def stop(self) -> None:
        if self.process is not None and self.process.poll() is None:
            self.process.send_signal(signal.SIGTERM)
            try:
                self.process.wait(timeout=15)
            except subprocess.TimeoutExpired:
                self.kill()

    def alive(self) -> bool:
        return self.process is not None and self.process.poll() is None

    def log_tail(self, lines: int = 60) -> str:
        try:
            return "\n".join(self.log_path.read_text(errors="replace").splitlines()[-lines:])
        except OSError:
            return ""


@dataclass(frozen=True)
class Pair:
    """One request sent to both URLs of a paired Traffic: its group, when it started
    (seconds after the traffic did) and each side's TPOT in seconds."""

    group: str
    at: float
    first: float
    second: float


def _streamed(url: str, group: str, body: dict[str, Any]) -> tuple[bool, str, float | None]:
    """A streamed chat request through the pilot's client (``pilot.load.stream_chat``):
    (ok, detail, TPOT as the pilot times it: first content to the end, over the tokens
    after the first)."""
    import asyncio

    import httpx

    from specd.pilot.load import RequestResult, stream_chat

    async def one() -> RequestResult:
        async with httpx.AsyncClient(timeout=120) as http:
            result = RequestResult(0, group, 0, "", int(body["max_tokens"]), False, 0.0)
            return await stream_chat(http, url, body, result, time.perf_counter())

    result = asyncio.run(one())
    return result.outcome == "ok", f"{result.status} {result.outcome} {result.error}", result.tpot_s


class Traffic:
    """A bounded closed loop of chat requests through a Service URL (task groups drawn from
    ``prompts``, by default chat and code), counting every request and every failure; stops
    on exit.

    ``paired_with``: a second URL that gets every request too, right after (or, every other
    time, right before) the first, with the same seed, the groups taken in turn: the two
    services decode the same requests one after the other and never at the same time, so a
    comparison of the two is not a comparison of whichever happened to share the CPU with the
    other's heavier rounds.
    Paired requests stream, and each pair whose two sides both succeeded is kept in
    ``pairs`` with both sides' TPOT as the client saw it (``paired_speed`` compares them).
    """

    def __init__(self, url: str, concurrency: int = 2, max_tokens: int = 24,
                 prompts: dict[str, str] | None = None,
                 temperatures: dict[str, float] | None = None,
                 paired_with: str | None = None) -> None:
        self.urls = [url] + ([paired_with] if paired_with else [])
        self.stop, self.max_tokens = threading.Event(), max_tokens
        self.temperatures = temperatures or {}  # per task group; greedy otherwise
        self.prompts = prompts or {"chat": "Write a short greeting.",
                                   "code": "Write a Python function that adds two numbers."}
        self.sent = self.failed = 0
        # each failure as "+<s since start> (<s it took>): <status and body>": whether a
        # burst of failures took milliseconds or connect retries' seconds tells a drained
        # backend from a worker that refused connections
        self.errors: list[str] = []
        self.pairs: list[Pair] = []  # paired requests: both sides' TPOT
        self.started = 0.0  # the clock starts with the traffic (__enter__)
        self.lock = threading.Lock()
        self.threads = [threading.Thread(target=self.loop, args=(i,), daemon=True)
                        for i in range(concurrency)]

    def loop(self, index: int) -> None:
        import httpx

        # groups drawn at random (seeded): alternating them in lock-step with the load
        # balancer's round robin can send every request of a group to one track. Paired
        # requests go to one worker per side and take the groups in turn, so that a window
        # holds nearly as many pairs of each (drawn at random, a 60 s window held 7 code
        # pairs and 3 chat)
        rng = random.Random(index)
        groups = sorted(self.prompts)
        with httpx.Client(timeout=120) as http:
            n = 0
            while not self.stop.is_set():
                paired = len(self.urls) > 1
                group = groups[n % len(groups)] if paired else rng.choice(groups)
                body = {"model": "smollm2-135m", "max_tokens": self.max_tokens,
                        "temperature": self.temperatures.get(group, 0.0),
                        "messages": [{"role": "user", "content": self.prompts[group]}]}
                if paired:
                    body["seed"] = 1000 * index + n  # the same tokens on both sides
                    body["stream"], body["stream_options"] = True, {"include_usage": True}
                began = time.monotonic()
                # each group's requests go first to each side in turn
                order = self.urls if (n // len(groups)) % 2 == 0 else self.urls[::-1]
                tpot = {url: self.post(http, url, group, body) for url in order}
                if paired and None not in tpot.values():
                    with self.lock:
                        self.pairs.append(Pair(group, began - self.started,
                                               tpot[self.urls[0]], tpot[self.urls[1]]))
                n += 1

    def post(self, http: Any, url: str, group: str, body: dict[str, Any]) -> float | None:
        """One request; a streamed one returns its TPOT (seconds from the first to the last
        token over the tokens after the first; None if it failed or had one token)."""
        import httpx

        began = time.monotonic()
        tpot = None
        try:
            if body.get("stream"):
                ok, detail, tpot = _streamed(url, group, body)
            else:
                response = http.post(f"{url}/v1/chat/completions",
                                     headers={"X-Specd-Task-Group": group}, json=body)
                ok = response.status_code == 200
                detail = f"{response.status_code} {response.text[:200]}"
        except httpx.HTTPError as exc:
            ok, detail = False, f"{type(exc).__name__}: {exc}"
        with self.lock:
            self.sent += 1
            if not ok:
                self.failed += 1
                self.errors.append(f"+{began - self.started:.1f}s "
                                   f"({time.monotonic() - began:.2f}s): {detail}")
        return tpot if ok else None

    def paired_speed(self, group: str, since: float, until: float) -> tuple[float, int]:
        """The second URL's TPOT over the first's, the median over the ``group``'s pairs
        started between ``since`` and ``until`` (seconds after the traffic started), and how
        many pairs: above 1, the first URL decodes faster. A median of paired ratios, so a
        burst of other work on the machine that slows a few requests moves it little."""
        ratios = [p.second / p.first for p in self.pairs
                  if p.group == group and since <= p.at <= until and p.first > 0]
        return (statistics.median(ratios) if ratios else float("nan")), len(ratios)

    def failures(self) -> str:
        """The failures for an assertion message: a string, so pytest prints it whole."""
        shown = self.errors[:3] + (["..."] if len(self.errors) > 5 else []) + self.errors[3:][-2:]
        lines = (" ".join(error.split())[:160] for error in shown)  # HTML bodies: one line
        return f"{self.failed} of {self.sent} failed:\n" + "\n".join(lines)

    def __enter__(self) -> Traffic:
        self.started = time.monotonic()
        for thread in self.threads:
            thread.start()
        return self

    def __exit__(self, *exc: object) -> None:
        self.stop.set()
        for thread in self.threads:
            thread.join(timeout=150)


# generous: on a loaded 2-core machine each real worker takes minutes to start
SVC_READY_S = 600


class Svc:
    """One SpeculativeService in a test: create, patch, read and wait on its status."""

    def __init__(self, cluster: Any, namespace: str, name: str) -> None:
        from kubernetes import client

        api = cluster.api_client()
        self.custom, self.core = client.CustomObjectsApi(api), client.CoreV1Api(api)
        self.cluster, self.ns, self.name = cluster, namespace, name

    def create(self, spec: dict) -> None:
        self.custom.create_namespaced_custom_object(
            k8s.GROUP, k8s.VERSION, self.ns, k8s.PLURAL,
            {"apiVersion": k8s.API_VERSION, "kind": k8s.KIND, "metadata": {"name": self.name},
             "spec": spec})

    def delete(self) -> None:
        self.custom.delete_namespaced_custom_object(k8s.GROUP, k8s.VERSION, self.ns, k8s.PLURAL,
                                                    self.name)
        wait_for(lambda: not [p for p in self.core.list_namespaced_pod(
            self.ns, label_selector=f"{k8s.LABEL_SERVICE}={self.name}").items],
                 f"the pods of {self.name} gone", timeout=120)

    def patch(self, body: dict) -> None:
        self.custom.patch_namespaced_custom_object(k8s.GROUP, k8s.VERSION, self.ns, k8s.PLURAL,
                                                   self.name, body)

    def status(self) -> dict:
        return self.custom.get_namespaced_custom_object(
            k8s.GROUP, k8s.VERSION, self.ns, k8s.PLURAL, self.name).get("status") or {}

    def wait(self, predicate, what: str, timeout: float = SVC_READY_S) -> dict:
        def check() -> dict | None:
            status = self.status()
            return status if predicate(status) else None

        try:
            return wait_for(check, what, timeout=timeout, interval=1)
        except TimeoutError as exc:
            raise TimeoutError(f"{exc}; status: {json.dumps(self.status())[:3000]}") from exc

    def policy(self, track: str) -> dict[str, Any]:
        """The policy document the track's ConfigMap holds."""
        cm = self.core.read_namespaced_config_map(manifests.configmap_name(self.name, track),
                                                  self.ns)
        return dict(json.loads(cm.data["policy.json"]))

    def policy_mode(self, track: str) -> str:
        return str(self.policy(track)["mode"])

    def pods_report(self) -> list[str]:
        """For a failed assertion: each pod of the service (deleted ones too) with its
        readiness and restarts, and the last events the runner and controllers wrote on it."""
        lines = []
        for pod in self.core.list_namespaced_pod(
                self.ns, label_selector=f"{k8s.LABEL_SERVICE}={self.name}").items:
            statuses = pod.status.container_statuses or []
            lines.append(f"{pod.metadata.name}: ready={[s.ready for s in statuses]} "
                         f"restarts={[s.restart_count for s in statuses]} "
                         f"deleting={pod.metadata.deletion_timestamp is not None}")
            events = sorted(self.core.list_namespaced_event(
                self.ns, field_selector=f"involvedObject.name={pod.metadata.name}").items,
                key=lambda e: str(e.last_timestamp or e.event_time or ""))  # the API: any order
            lines += [f"  {e.last_timestamp or e.event_time} {e.reason}: {e.message}"
                      for e in events[-5:]]
        return lines

    def tracks(self) -> dict[str, int]:
        pods = [p for p in self.core.list_namespaced_pod(
            self.ns, label_selector=f"{k8s.LABEL_SERVICE}={self.name}").items
            if p.metadata.deletion_timestamp is None]
        out: dict[str, int] = {}
        for pod in pods:
            track = pod.metadata.labels[k8s.LABEL_TRACK]
            out[track] = out.get(track, 0) + 1
        return out


@contextlib.contextmanager
def prometheus_stopped(cluster: Any) -> Iterator[None]:
    """The cluster's Prometheus frozen (SIGSTOP: it answers nothing), then resumed."""
    state = json.loads((cluster.state_dir / "state.json").read_text())
    (pid,) = [p["pid"] for p in state["processes"] if p["name"] == "prometheus"]
    os.kill(pid, signal.SIGSTOP)
    try:
        yield
    finally:
        os.kill(pid, signal.SIGCONT)
