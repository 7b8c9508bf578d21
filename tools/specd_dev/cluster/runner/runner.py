"""The pod runner: plays the kubelet for the fake nodes, for specd's own pods.

``python -m specd_dev.cluster.runner --state-dir DIR`` (started by ``specd cluster up``). Every
half second it lists the pods bound to the fake nodes, the ConfigMaps, Services and
EndpointSlices; gives each runner pod (:func:`rules.is_runner_pod`) a :class:`PodWorker`
thread; rewrites the HAProxy configuration when a Service's Ready endpoints change; rewrites
Prometheus's file_sd targets when pods come and go; and writes ``runner/state.json`` (the
processes with their PIDs and ports, and each Service's loopback URL) for ``specd cluster
status``, ``url`` and ``logs``. Lists rather than watches: a resync every half second is
simple, survives API restarts, and costs little at the few dozen objects of a dev cluster.

How many processes run at once is :mod:`admission`'s decision (memory reservations in 80 %
of the memory available at start-up, and ``max_processes`` from ``runner/config.json``,
re-read every loop, so ``specd cluster up --max-processes N`` changes it on a running
cluster). Pods that do not fit stay not Ready with reason ``ProcessCapReached`` and a
Warning Event.
"""

from __future__ import annotations

import argparse
import contextlib
import http.server
import json
import logging
import os
import signal
import threading
from pathlib import Path
from typing import Any

import yaml
from kubernetes import client, config
from kubernetes.client.exceptions import ApiException

from specd import SpecdError
from specd_dev.cluster import processes
from specd_dev.cluster.runner import admission, discovery, proxy, rules
from specd_dev.cluster.runner.pod_worker import PodWorker, now_rfc3339

log = logging.getLogger("specd_dev.cluster.runner")

LOOP_S = 0.5
ADDRESSES_FILE = "pod-addresses.json"  # in the runner's directory (see _write_addresses)
FAKE_NODE_ANNOTATION = "kwok.x-k8s.io/node"
SERVICES = "services"  # the port-lease holder of the Services' HAProxy frontends


def memory_available() -> int:
    with contextlib.suppress(OSError):
        for line in open("/proc/meminfo"):
            if line.startswith("MemAvailable:"):
                return int(line.split()[1]) * 1024
    return 0


def _json(response: Any) -> Any:
    return json.loads(response.data)


class Runner:
    def __init__(self, state_dir: Path, kubeconfig: Path, haproxy_config: Path,
                 haproxy_pidfile: Path, proxy_health_port: int, targets_file: Path,
                 health_port: int, backoff_base_s: float = 1.0, backoff_max_s: float = 60.0,
                 backoff_reset_s: float = 60.0) -> None:
        self.state_dir = state_dir
        self.dir = state_dir / "runner"
        self.pods_dir = self.dir / "pods"
        # persistentVolumeClaim volumes: one directory per claim, shared by the pods that
        # mount it and kept when they go (the scheduler only places pods whose claim is Bound)
        self.claims_dir = self.dir / "claims"
        self.logs_dir = state_dir / "logs" / "pods"
        self.kubeconfig = kubeconfig
        self.haproxy_config, self.haproxy_pidfile = haproxy_config, haproxy_pidfile
        self.proxy_health_port = proxy_health_port
        self.targets_file = targets_file
        self.health_port = health_port
        self.backoff_base_s, self.backoff_max_s = backoff_base_s, backoff_max_s
        self.backoff_reset_s = backoff_reset_s
        self.api_client = config.new_client_from_config(config_file=str(kubeconfig))
        self.api_client.configuration.connection_pool_maxsize = 32
        self.core = client.CoreV1Api(self.api_client)
        self.discovery_api = client.DiscoveryV1Api(self.api_client)
        server = self.api_client.configuration.host  # https://127.0.0.1:<port>
        host, _, port = server.removeprefix("https://").partition(":")
        self.apiserver_host_port = (host, port or "443")
        self.ca_file = self.api_client.configuration.ssl_ca_cert
        self.workers: dict[tuple[str, str], PodWorker] = {}
        self.lock = threading.Lock()
        self.slots: dict[str, int] = {}  # uid -> memory reserved by its process
        self.available_at_start = memory_available()
        self.capacity = self._capacity()
        self.service_ports: dict[str, int] = {}
        self.port_leases = processes.PortLeases()  # pods' and Services' loopback ports
        self.service_backends: dict[str, int] = {}  # Ready pods behind each Service URL
        self._configmaps: dict[str, dict[str, dict[str, Any]]] = {}
        self._proxy_text = ""
        self._targets_text = ""
        self._state_text = ""
        self._addresses_text = ""
        self.synced = threading.Event()
        self.stop = threading.Event()

    # ---- settings ------------------------------------------------------------------------

    def _capacity(self) -> admission.Capacity:
        settings: dict[str, Any] = {}
        with contextlib.suppress(OSError, ValueError):
            settings = json.loads((self.dir / "config.json").read_text())
        cap = settings.get("max_processes")
        return admission.Capacity.from_available(self.available_at_start,
                                                 int(cap) if cap else None)

    # ---- what pod workers call -----------------------------------------------------------

    def admit(self, worker: PodWorker) -> str | None:
        """None when the worker may start a process (its slot is then held); else why not."""
        with self.lock:
            if worker.uid in self.slots:
                return None
            need = admission.reservation(worker.container)
            why = admission.refusal(self.capacity, self.slots, need)
            if why is None:
                self.slots[worker.uid] = need
            return why

    def lease_ports(self, worker: PodWorker, count: int) -> list[int]:
        """Loopback ports for the worker's container ports, held until :meth:`release`."""
        return self.port_leases.lease(worker.uid, count)

    def release(self, worker: PodWorker) -> None:
        self.port_leases.release(worker.uid)
        with self.lock:
            self.slots.pop(worker.uid, None)
            if self.workers.get(worker.key) is worker:
                del self.workers[worker.key]

    def configmaps(self, namespace: str) -> dict[str, dict[str, Any]]:
        return self._configmaps.get(namespace, {})

    def secrets(self, namespace: str, names: set[str]) -> dict[str, dict[str, Any]]:
        found = {}
        for name in names:
            try:
                found[name] = _json(self.core.read_namespaced_secret(
                    name, namespace, _preload_content=False))
            except ApiException as exc:
                if exc.status != 404:
                    raise
        return found

    def request_token(self, pod: dict[str, Any], audience: str | None, seconds: int) -> str:
        meta = pod["metadata"]
        account = pod["spec"].get("serviceAccountName") or "default"
        spec: dict[str, Any] = {"expirationSeconds": seconds,
                                "boundObjectRef": {"kind": "Pod", "apiVersion": "v1",
                                                   "name": meta["name"], "uid": meta["uid"]}}
        if audience:
            spec["audiences"] = [audience]
        response = self.core.create_namespaced_service_account_token(
            account, meta["namespace"], {"spec": spec}, _preload_content=False)
        return str(_json(response)["status"]["token"])

    def token_kubeconfig(self, pod_dir: Path, token_dir: Path) -> Path:
        """Where no private mount namespace is possible: the same token in a kubeconfig."""
        host, port = self.apiserver_host_port
        doc = {"apiVersion": "v1", "kind": "Config", "current-context": "pod",
               "clusters": [{"name": "local", "cluster": {
                   "server": f"https://{host}:{port}",
                   "certificate-authority": str(token_dir / "ca.crt")}}],
               "users": [{"name": "sa", "user": {"tokenFile": str(token_dir / "token")}}],
               "contexts": [{"name": "pod", "context": {"cluster": "local", "user": "sa"}}]}
        path = pod_dir / "kubeconfig"
        path.write_text(yaml.safe_dump(doc))
        return path

    def delete_pod(self, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        with contextlib.suppress(ApiException):
            self.core.delete_namespaced_pod(
                meta["name"], meta["namespace"], grace_period_seconds=0,
                body={"preconditions": {"uid": meta["uid"]}, "gracePeriodSeconds": 0})

    def patch_status(self, pod: dict[str, Any], body: dict[str, Any]) -> bool:
        meta = pod["metadata"]
        try:
            self.core.patch_namespaced_pod_status(meta["name"], meta["namespace"],
                                                  {"status": body}, _preload_content=False)
            return True
        except ApiException as exc:
            if exc.status != 404:
                log.warning("status of %s/%s: %s", meta["namespace"], meta["name"], exc.reason)
            return False
        except OSError as exc:
            log.warning("status of %s/%s: %s", meta["namespace"], meta["name"], exc)
            return False

    def event(self, pod: dict[str, Any], reason: str, message: str, kind: str) -> None:
        meta = pod["metadata"]
        now = now_rfc3339()
        body = {
            "metadata": {"generateName": f"{meta['name']}.", "namespace": meta["namespace"]},
            "involvedObject": {"kind": "Pod", "apiVersion": "v1", "name": meta["name"],
                               "namespace": meta["namespace"], "uid": meta["uid"]},
            "reason": reason, "message": message, "type": kind,
            "source": {"component": "specd-pod-runner", "host": pod["spec"].get("nodeName")},
            "firstTimestamp": now, "lastTimestamp": now, "count": 1,
            "reportingComponent": "specd-pod-runner", "reportingInstance": "local",
        }
        try:
            self.core.create_namespaced_event(meta["namespace"], body, _preload_content=False)
        except (ApiException, OSError) as exc:
            log.warning("event %s on %s/%s: %s", reason, meta["namespace"], meta["name"], exc)

    # ---- the loop ------------------------------------------------------------------------

    def run(self) -> None:
        self._serve_health()
        self.dir.mkdir(parents=True, exist_ok=True)
        self._kill_orphans()
        while not self.stop.is_set():
            try:
                self.sync()
                self.synced.set()
            except (ApiException, OSError, SpecdError) as exc:  # API restarting, a blip: retry
                log.warning("sync failed (retrying): %s", exc)
            self.stop.wait(LOOP_S)
        self.shutdown()

    def sync(self) -> None:
        self.capacity = self._capacity()
        fake_nodes = {
            n["metadata"]["name"] for n in _json(self.core.list_node(
                _preload_content=False))["items"]
            if (n["metadata"].get("annotations") or {}).get(FAKE_NODE_ANNOTATION) == "fake"}
        pods = [p for p in _json(self.core.list_pod_for_all_namespaces(
            _preload_content=False))["items"]
            if p["spec"].get("nodeName") in fake_nodes and rules.is_runner_pod(p)]
        by_ns: dict[str, dict[str, dict[str, Any]]] = {}
        for cm in _json(self.core.list_config_map_for_all_namespaces(
                _preload_content=False))["items"]:
            by_ns.setdefault(cm["metadata"]["namespace"], {})[cm["metadata"]["name"]] = cm
        self._configmaps = by_ns
        self._reconcile_workers(pods)
        services = _json(self.core.list_service_for_all_namespaces(
            _preload_content=False))["items"]
        slices = _json(self.discovery_api.list_endpoint_slice_for_all_namespaces(
            _preload_content=False))["items"]
        self._sync_proxy(services, slices)
        self._sync_targets()
        self._write_state()

    def _reconcile_workers(self, pods: list[dict[str, Any]]) -> None:
        seen = set()
        for pod in pods:
            meta = pod["metadata"]
            key = (meta["namespace"], meta["name"])
            seen.add(key)
            worker = self.workers.get(key)
            if worker is not None and worker.uid != meta["uid"]:
                worker.gone.set()  # same name, new pod: the old one is gone
                worker = None
            if worker is None:
                if meta.get("deletionTimestamp"):
                    self.delete_pod(pod)  # never started here: nothing to stop
                    continue
                try:
                    worker = PodWorker(self, pod)
                except rules.PodSpecError as exc:
                    log.warning("%s/%s: %s", *key, exc)
                    continue
                with self.lock:
                    self.workers[key] = worker
                worker.start()
            else:
                worker.update(pod)
        for key, worker in list(self.workers.items()):
            if key not in seen:
                worker.gone.set()

    def _local_port(self, namespace: str, pod: str, container_port: int) -> int | None:
        worker = self.workers.get((namespace, pod))
        return worker.ports.get(container_port) if worker else None

    def _sync_proxy(self, services: list[dict[str, Any]], slices: list[dict[str, Any]]) -> None:
        fronts = proxy.frontends(services, slices, self.service_ports,
                                 lambda: self.port_leases.lease(SERVICES, 1)[0],
                                 self._local_port)
        self.service_ports = {proxy.url_key(f.namespace, f.service,
                                            f.port_name or str(f.service_port)): f.local_port
                              for f in fronts}
        self.port_leases.hold(SERVICES, self.service_ports.values())  # gone Services' ports free
        backends = {proxy.url_key(f.namespace, f.service, f.port_name or str(f.service_port)):
                    len(f.servers) for f in fronts}
        text = proxy.config_text(fronts, self.proxy_health_port)
        if text != self._proxy_text:
            proxy.reload(self.haproxy_config, text, self.haproxy_pidfile,
                         self.proxy_health_port)
            self._proxy_text = text
        self.service_backends = backends  # published once HAProxy has them

    def _sync_targets(self) -> None:
        entries = []
        for worker in list(self.workers.values()):
            if worker.process is None:
                continue
            pod = worker.pod_with_status()
            pod["status"]["phase"] = "Running"
            entries.append((pod, worker.ports, worker.state.ready))
        text = discovery.targets_json(discovery.target_groups(entries))
        if text != self._targets_text:
            tmp = self.targets_file.with_suffix(".tmp")
            tmp.write_text(text)
            os.replace(tmp, self.targets_file)
            self._targets_text = text

    def _write_addresses(self) -> None:
        """``pod-addresses.json``: "podIP:containerPort" -> "127.0.0.1:port" for every running
        pod, so a process outside the (fake) pod network reaches a pod by the address the
        API gives for it (``specd operator --pod-address-map``)."""
        addresses = {}
        for worker in list(self.workers.values()):
            if worker.process is None:
                continue
            ip = worker.pod_with_status()["status"]["podIP"]
            for container_port, local in worker.ports.items():
                addresses[f"{ip}:{container_port}"] = f"{processes.LOOPBACK}:{local}"
        text = json.dumps(addresses, indent=1, sort_keys=True)
        if text != self._addresses_text:
            tmp = self.dir / "pod-addresses.json.tmp"
            tmp.write_text(text)
            os.replace(tmp, self.dir / ADDRESSES_FILE)
            self._addresses_text = text

    def _write_state(self) -> None:
        self._write_addresses()
        state = {"capacity": self.capacity.describe(sum(self.slots.values())),
                 "pods": sorted((w.snapshot() for w in list(self.workers.values())),
                                key=lambda s: (s["namespace"], s["pod"])),
                 "services": self.service_ports, "backends": self.service_backends}
        text = json.dumps(state, indent=1, sort_keys=True)
        if text != self._state_text:
            tmp = self.dir / "state.json.tmp"
            tmp.write_text(text)
            os.replace(tmp, self.dir / "state.json")
            self._state_text = text

    def _kill_orphans(self) -> None:
        """Processes a killed runner left behind (recognised by pid and start time)."""
        with contextlib.suppress(OSError, ValueError):
            old = json.loads((self.dir / "state.json").read_text())
            for entry in old.get("pods", []):
                if entry.get("pid") and processes.is_alive(entry["pid"], entry["start_ticks"]):
                    with contextlib.suppress(ProcessLookupError, PermissionError):
                        os.killpg(entry["pid"], signal.SIGKILL)

    def shutdown(self) -> None:
        workers = list(self.workers.values())
        for worker in workers:
            worker.stopping.set()
        for worker in workers:
            worker.join(timeout=20)
        self._write_state()

    def _serve_health(self) -> None:
        runner = self

        class Health(http.server.BaseHTTPRequestHandler):
            def do_GET(self) -> None:  # noqa: N802 - http.server's name
                ok = runner.synced.is_set()
                self.send_response(200 if ok else 503)
                self.end_headers()
                self.wfile.write(b"ok\n" if ok else b"not synced yet\n")

            def log_message(self, *args: Any) -> None:
                pass

        server = http.server.ThreadingHTTPServer((rules.LOCAL_HOST, self.health_port), Health)
        threading.Thread(target=server.serve_forever, daemon=True).start()


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specd_dev.cluster.runner")
    parser.add_argument("--state-dir", type=Path, required=True)
    parser.add_argument("--kubeconfig", type=Path, required=True)
    parser.add_argument("--haproxy-config", type=Path, required=True)
    parser.add_argument("--haproxy-pidfile", type=Path, required=True)
    parser.add_argument("--proxy-health-port", type=int, required=True)
    parser.add_argument("--targets-file", type=Path, required=True)
    parser.add_argument("--health-port", type=int, required=True)
    parser.add_argument("--backoff-base", type=float, default=1.0)
    parser.add_argument("--backoff-max", type=float, default=60.0)
    args = parser.parse_args(argv)
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(message)s")
    runner = Runner(args.state_dir, args.kubeconfig, args.haproxy_config, args.haproxy_pidfile,
                    args.proxy_health_port, args.targets_file, args.health_port,
                    args.backoff_base, args.backoff_max)
    signal.signal(signal.SIGTERM, lambda *_: runner.stop.set())
    signal.signal(signal.SIGINT, lambda *_: runner.stop.set())
    runner.run()
    return 0

