"""One pod's life as a local process: the kubelet's pod worker, for one container.

A ``PodWorker`` thread owns one pod: it waits for a process slot, lays out the pod's volumes,
starts the container's argv (localised by :mod:`rules`) in its own process group, runs the
startup, readiness and liveness probes, restarts the process with exponential back-off when
it exits (``restartCount``, ``lastState``, ``CrashLoopBackOff``), keeps ConfigMap volumes in
sync, writes the pod's status, and on deletion sends SIGTERM to the group, waits the grace
period, SIGKILLs what is left and removes the pod (grace 0, as the kubelet does).
"""

from __future__ import annotations

import contextlib
import logging
import os
import shlex
import shutil
import signal
import socket
import subprocess
import sys
import threading
import time
import urllib.error
import urllib.request
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from specd.worker import model_cache
from specd_dev.cluster import processes
from specd_dev.cluster.runner import rules, status, volumes
from specd_dev.cluster.runner.status import ContainerState, Terminated

if TYPE_CHECKING:
    from specd_dev.cluster.runner.runner import Runner

log = logging.getLogger("specd_dev.cluster.runner")

# What the worker image would give every process (worker/Dockerfile's ENV lines that matter
# off the image): unbuffered logs and no hub downloads.
IMAGE_ENV = {"PYTHONUNBUFFERED": "1", "PYTHONDONTWRITEBYTECODE": "1", "HF_HUB_OFFLINE": "1"}
# Libraries read the in-cluster identity from this fixed path, so it cannot be rewritten in
# argv: it is bind-mounted in a private mount namespace where that is allowed (root).
SERVICE_ACCOUNT_DIR = "/var/run/secrets/kubernetes.io/serviceaccount"
# Where the worker image puts the project (worker/Dockerfile: WORKDIR /opt/specd, the
# repository's folders copied in, drafter artifacts under worker/artifacts): here, the
# source tree this runner runs from.
IMAGE_SOURCE_DIR = "/opt/specd"
SOURCE_TREE = Path(__file__).resolve().parents[4]
VOLUME_SYNC_S = 1.0
LOOP_S = 0.2


def now_rfc3339() -> str:
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime())


@dataclass
class ProbeState:
    successes: int = 0
    failures: int = 0
    next_at: float = 0.0


class PodWorker(threading.Thread):
    def __init__(self, runner: Runner, pod: dict[str, Any]) -> None:
        meta = pod["metadata"]
        super().__init__(name=f"pod-{meta['namespace']}/{meta['name']}", daemon=True)
        self.runner = runner
        self.pod = pod
        self.key = (meta["namespace"], meta["name"])
        self.uid = meta["uid"]
        self.container = rules.runner_container(pod)
        self.prestop_s = rules.prestop_sleep(self.container)
        self.dir = runner.pods_dir / f"{meta['namespace']}_{meta['name']}_{self.uid[:8]}"
        self.log_path = runner.logs_dir / f"{meta['namespace']}_{meta['name']}.log"
        self.state = ContainerState(name=self.container["name"],
                                    image=str(self.container.get("image", "")))
        self.ports: dict[int, int] = {}  # container port -> loopback port
        self.process: subprocess.Popen[bytes] | None = None
        self.process_ticks = -1
        self.started_mono = 0.0
        self.admitted = False
        self.crashes = 0  # consecutive short-lived runs, for the back-off
        self.restart_at = 0.0
        self.probes: dict[str, ProbeState] = {}
        self.mounts: dict[str, str] = {}
        self.gone = threading.Event()  # the pod vanished from the API
        self.stopping = threading.Event()  # the runner is shutting down
        self._pushed: dict[str, Any] | None = None
        self._last_volume_sync = 0.0
        self._events_sent: set[str] = set()
        self._token_cache: dict[tuple[str, int], tuple[str, float]] = {}
        self.started_at = now_rfc3339()

    # ---- called by the runner's loop ---------------------------------------------------

    def update(self, pod: dict[str, Any]) -> None:
        self.pod = pod

    @property
    def deleting(self) -> bool:
        return bool(self.pod["metadata"].get("deletionTimestamp"))

    def snapshot(self) -> dict[str, Any]:
        """What the runner's state file shows for this pod."""
        return {"namespace": self.key[0], "pod": self.key[1], "uid": self.uid,
                "pid": self.process.pid if self.process else None,
                "start_ticks": self.process_ticks,
                "ports": {str(k): v for k, v in self.ports.items()},
                "ready": self.state.ready, "restarts": self.state.restart_count,
                "log": str(self.log_path), "admitted": self.admitted,
                "waiting": self.state.waiting_reason if self.process is None else None}

    # ---- the thread ----------------------------------------------------------------------

    def run(self) -> None:
        try:
            self._run()
        except Exception:  # a bug here must not take the runner down silently
            log.exception("pod worker %s/%s failed", *self.key)
            self._kill_group(grace=0)
        finally:
            self.runner.release(self)

    def _run(self) -> None:
        wanted = rules.container_ports(self.container)
        self.ports = dict(zip(wanted, self.runner.lease_ports(self, len(wanted)), strict=True))
        while True:
            if self.stopping.is_set():
                self._kill_group(grace=min(rules.termination_grace(self.pod), 10.0))
                return
            if self.gone.is_set() or self.deleting:
                self._terminate()
                if not self.gone.is_set():
                    self.runner.delete_pod(self.pod)
                return
            if self.state.terminated is None:
                self._tick()
            self._push_status()
            time.sleep(LOOP_S)

    def _tick(self) -> None:
        if self.process is None:
            if not self.admitted:
                why = self.runner.admit(self)
                self.admitted = why is None
                if why is not None:
                    self._wait("ProcessCapReached", f"{why}; the pod starts when one ends")
                    return
            if time.monotonic() < self.restart_at:
                return
            self._start()
            return
        self._sync_volumes()
        code = self.process.poll()
        if code is not None:
            self._exited(code)
            return
        self._probe()

    # ---- start -------------------------------------------------------------------------

    def _start(self) -> None:
        try:
            self._layout_volumes(force=True)
            argv, env = self._command()
        except rules.PodSpecError as exc:
            self._wait("CreateContainerConfigError", str(exc))
            self._event("Failed", f"Error: {exc}")
            self.restart_at = time.monotonic() + 2.0
            return
        self.log_path.parent.mkdir(parents=True, exist_ok=True)
        with open(self.log_path, "ab") as sink:
            sink.write(f"==> {now_rfc3339()} start {shlex.join(argv)}\n".encode())
            sink.flush()
            self.process = subprocess.Popen(argv, stdout=sink, stderr=subprocess.STDOUT,
                                            stdin=subprocess.DEVNULL, env=env, cwd=self.dir,
                                            start_new_session=True)
        self.process_ticks = processes.start_ticks(self.process.pid)
        self.started_mono = time.monotonic()
        self.state.running_since = now_rfc3339()
        self.state.waiting_reason = self.state.waiting_message = None
        self.state.pid = self.process.pid
        self.state.started = "startupProbe" not in self.container
        self.state.ready = False
        self.probes = {}
        log.info("%s/%s: started pid %d (ports %s)", *self.key, self.process.pid, self.ports)
        self._event("Started", f"Started container {self.state.name} as pid {self.process.pid}",
                    kind="Normal", once=False)

    def _command(self) -> tuple[list[str], dict[str, str]]:
        configmaps = self.runner.configmaps(self.key[0])
        secrets = self.runner.secrets(self.key[0], self._secret_names())
        env = rules.resolve_env(self.pod_with_status(), self.container,
                                {k: {kk: vv.decode() for kk, vv in
                                     volumes.configmap_bytes(v).items()}
                                 for k, v in configmaps.items()},
                                {k: {kk: vv.decode(errors="replace") for kk, vv in
                                     volumes.secret_bytes(v).items()}
                                 for k, v in secrets.items()})
        paths = {IMAGE_SOURCE_DIR: str(SOURCE_TREE), **self.mounts}
        env = rules.localise_env(env, paths, self.ports)
        argv = [rules.expand(a, env) for a in rules.local_argv(self.container)]
        argv = rules.localise_argv(argv, paths, self.ports)
        if not argv:
            raise rules.PodSpecError("the container has no command")
        argv[0] = self._executable(argv[0])
        full_env = {"PATH": f"{Path(sys.executable).parent}{os.pathsep}"
                            f"{os.environ.get('PATH', '/usr/bin:/bin')}",
                    "HOME": str(self.dir / "home"), "LANG": "C.UTF-8", **IMAGE_ENV,
                    # the image ships the embedded model already converted
                    # (worker/Dockerfile); here, the host's conversion stands in for it
                    model_cache.CACHE_ENV: str(model_cache.cache_root() or "none")}
        (self.dir / "home").mkdir(parents=True, exist_ok=True)
        full_env.update(env)
        full_env["OMP_NUM_THREADS"] = str(rules.cpu_threads(self.container))
        if self._has_service_account():
            full_env["KUBERNETES_SERVICE_HOST"], full_env["KUBERNETES_SERVICE_PORT"] = \
                self.runner.apiserver_host_port
            full_env["KUBERNETES_SERVICE_PORT_HTTPS"] = full_env["KUBERNETES_SERVICE_PORT"]
            argv = self._with_service_account(argv, full_env)
        return argv, full_env

    def _executable(self, name: str) -> str:
        if os.path.basename(name) == "specd":
            local = Path(sys.executable).parent / "specd"
            if local.exists():
                return str(local)
        return shutil.which(os.path.basename(name)) or name

    def _has_service_account(self) -> bool:
        return any(m["mountPath"] == SERVICE_ACCOUNT_DIR
                   for m in self.container.get("volumeMounts", []))

    def _with_service_account(self, argv: list[str], env: dict[str, str]) -> list[str]:
        """Put the token where client libraries look for it: a bind mount in a private
        mount namespace (needs root and unshare); otherwise a kubeconfig with the same token."""
        source = self.mounts[SERVICE_ACCOUNT_DIR]
        if os.geteuid() == 0 and shutil.which("unshare"):
            script = (f"set -e; mkdir -p {shlex.quote(SERVICE_ACCOUNT_DIR)}; "
                      f"mount --bind {shlex.quote(source)} {shlex.quote(SERVICE_ACCOUNT_DIR)}; "
                      'exec "$@"')
            return ["unshare", "--mount", "--propagation", "private", "sh", "-c", script,
                    "sh", *argv]
        env["KUBECONFIG"] = str(self.runner.token_kubeconfig(self.dir, Path(source)))
        return argv

    def _secret_names(self) -> set[str]:
        names = set()
        for var in self.container.get("env", []):
            ref = (var.get("valueFrom") or {}).get("secretKeyRef")
            if ref:
                names.add(ref["name"])
        for entry in self.container.get("envFrom", []):
            if "secretRef" in entry:
                names.add(entry["secretRef"]["name"])
        for volume in self.pod["spec"].get("volumes", []):
            if "secret" in volume:
                names.add(volume["secret"].get("secretName", ""))
            for source in (volume.get("projected") or {}).get("sources", []):
                if "secret" in source:
                    names.add(source["secret"]["name"])
        return names

    def pod_with_status(self) -> dict[str, Any]:
        pod = dict(self.pod)
        ip = status.pod_ip(self.uid)
        pod["status"] = {**pod.get("status", {}), "podIP": ip, "podIPs": [{"ip": ip}],
                         "hostIP": status.HOST_IP, "hostIPs": [{"ip": status.HOST_IP}]}
        return pod

    # ---- volumes -----------------------------------------------------------------------

    def _layout_volumes(self, force: bool = False) -> None:
        volumes_by_name = {v["name"]: v for v in self.pod["spec"].get("volumes", [])}
        configmaps = self.runner.configmaps(self.key[0])
        secrets = self.runner.secrets(self.key[0], self._secret_names())
        mounts: dict[str, str] = {}
        for mount in self.container.get("volumeMounts", []):
            volume = volumes_by_name.get(mount["name"])
            if volume is None:
                raise rules.PodSpecError(f"volumeMount {mount['name']!r} names no volume")
            local = self.dir / "volumes" / mount["name"]
            claim = (volume.get("persistentVolumeClaim") or {}).get("claimName")
            if claim:  # the claim's data outlives the pod, as a bound volume's does
                local = self.runner.claims_dir / self.key[0] / claim
            files = volumes.volume_files(self.pod_with_status(), volume, configmaps, secrets,
                                         self._token)
            if files is None:
                local.mkdir(parents=True, exist_ok=True)
            elif volumes.write_atomic(local, files) and not force:
                log.info("%s/%s: volume %s updated", *self.key, mount["name"])
            target = local / mount["subPath"] if mount.get("subPath") else local
            mounts[mount["mountPath"]] = str(target)
        self.mounts = mounts
        self._last_volume_sync = time.monotonic()

    def _sync_volumes(self) -> None:
        if time.monotonic() - self._last_volume_sync < VOLUME_SYNC_S:
            return
        try:
            self._layout_volumes()
        except rules.PodSpecError as exc:  # a ConfigMap deleted under a running pod: keep
            log.warning("%s/%s: volume sync: %s", *self.key, exc)
            self._last_volume_sync = time.monotonic()

    def _token(self, projection: Mapping[str, Any]) -> str:
        """A bound ServiceAccount token, refreshed after 80 % of its life (as the kubelet)."""
        audience = str(projection.get("audience") or "")
        seconds = max(600, int(projection.get("expirationSeconds") or 3607))
        cached = self._token_cache.get((audience, seconds))
        if cached and time.monotonic() < cached[1]:
            return cached[0]
        token = self.runner.request_token(self.pod, audience or None, seconds)
        self._token_cache[(audience, seconds)] = (token, time.monotonic() + 0.8 * seconds)
        return token

    # ---- probes ------------------------------------------------------------------------

    def _probe(self) -> None:
        now = time.monotonic()
        if not self.state.started:
            result = self._run_probe("startupProbe", now)
            if result is True:
                self.state.started = True
            elif result is False and self._exceeded("startupProbe"):
                self._restart_unhealthy("Startup probe failed")
            return
        readiness = self._run_probe("readinessProbe", now)
        if readiness is not None:
            spec, state = self.container["readinessProbe"], self.probes["readinessProbe"]
            if readiness and state.successes >= int(spec.get("successThreshold", 1)):
                self.state.ready = True
            elif not readiness and self._exceeded("readinessProbe"):
                self.state.ready = False
        elif "readinessProbe" not in self.container:
            self.state.ready = True
        liveness = self._run_probe("livenessProbe", now)
        if liveness is False and self._exceeded("livenessProbe"):
            self._restart_unhealthy("Liveness probe failed")

    def _exceeded(self, kind: str) -> bool:
        spec = self.container[kind]
        return self.probes[kind].failures >= int(spec.get("failureThreshold", 3))

    def _run_probe(self, kind: str, now: float) -> bool | None:
        """True/False when the probe ran now; None when it is absent or not due."""
        spec = self.container.get(kind)
        if spec is None:
            return None
        state = self.probes.setdefault(kind, ProbeState(
            next_at=self.started_mono + float(spec.get("initialDelaySeconds", 0))))
        if now < state.next_at:
            return None
        state.next_at = now + float(spec.get("periodSeconds", 10))
        ok = self._check(spec)
        if ok:
            state.successes, state.failures = state.successes + 1, 0
        else:
            state.successes, state.failures = 0, state.failures + 1
        return ok

    def _check(self, spec: Mapping[str, Any]) -> bool:
        timeout = float(spec.get("timeoutSeconds", 1))
        try:
            if "httpGet" in spec:
                get = spec["httpGet"]
                port = self.ports[rules.port_by_name(self.container, get["port"])]
                url = f"http://{rules.LOCAL_HOST}:{port}{get.get('path', '/')}"
                with urllib.request.urlopen(url, timeout=timeout) as response:
                    return 200 <= response.status < 400
            if "tcpSocket" in spec:
                port = self.ports[rules.port_by_name(self.container, spec["tcpSocket"]["port"])]
                with socket.create_connection((rules.LOCAL_HOST, port), timeout=timeout):
                    return True
        except (OSError, urllib.error.URLError, KeyError, rules.PodSpecError):
            return False
        return False  # exec and grpc probes are not run here: never ready, said in the docs

    def _restart_unhealthy(self, why: str) -> None:
        self._event("Unhealthy", f"{why}; the container will be restarted")
        self._kill_group(grace=rules.termination_grace(self.pod), restart=True)

    # ---- exit, restart, termination ----------------------------------------------------

    def _exited(self, code: int, stopped: bool = False) -> None:
        """Record the exit; ``stopped``: the runner ended it (deletion, shutdown), so no
        restart and no back-off."""
        assert self.process is not None
        ran = time.monotonic() - self.started_mono
        finished = now_rfc3339()
        sig = -code if code < 0 else None
        exit_code = 128 + sig if sig else code
        record = Terminated(exit_code=exit_code, reason="Completed" if code == 0 else "Error",
                            started_at=self.state.running_since or finished,
                            finished_at=finished, signal=sig)
        with open(self.log_path, "ab") as sink:
            sink.write(f"==> {finished} exited with {exit_code} after {ran:.1f}s\n".encode())
        self.process, self.state.pid = None, None
        self.state.running_since, self.state.ready, self.state.started = None, False, False
        policy = self.pod["spec"].get("restartPolicy", "Always")
        if stopped or policy == "Never" or (policy == "OnFailure" and exit_code == 0):
            self.state.terminated = record
            return
        self.state.last_terminated = record
        self.crashes = 1 if ran >= self.runner.backoff_reset_s else self.crashes + 1
        delay = min(self.runner.backoff_base_s * 2 ** (self.crashes - 1), self.runner.backoff_max_s)
        self.restart_at = time.monotonic() + delay
        self.state.restart_count += 1
        self._wait("CrashLoopBackOff",
                   f"back-off {delay:.0f}s restarting failed container={self.state.name} "
                   f"pod={self.key[1]}_{self.key[0]}({self.uid})")
        self._event("BackOff", f"Back-off restarting failed container {self.state.name} "
                    f"(exit {exit_code}; log: specd cluster logs {self.key[1]} -n {self.key[0]})",
                    once=False)

    def _terminate(self) -> None:
        """The kubelet's order on deletion: the preStop hook (the process keeps serving while
        proxies drop the endpoint), then SIGTERM with what is left of the grace period (at
        least 2 s, the kubelet's one-off extension when the hook used it all)."""
        grace = rules.termination_grace(self.pod)
        started = time.monotonic()
        hold = 0.0 if self.gone.is_set() else min(self.prestop_s, grace)
        while (time.monotonic() - started < hold and self.process is not None
               and self.process.poll() is None and not self.stopping.is_set()):
            self._push_status()
            time.sleep(LOOP_S)
        left = grace - (time.monotonic() - started)
        self._kill_group(grace=left if hold == 0 else max(left, 2.0))

    def _kill_group(self, grace: float, restart: bool = False) -> None:
        """SIGTERM the process group, wait up to ``grace`` s, SIGKILL what is left;
        ``restart``: the container restarts afterwards (a failed liveness probe)."""
        process = self.process
        if process is None:
            return
        for sig, wait in ((signal.SIGTERM, grace), (signal.SIGKILL, 5.0)):
            with contextlib.suppress(ProcessLookupError, PermissionError):
                os.killpg(process.pid, sig)
            deadline = time.monotonic() + wait
            while time.monotonic() < deadline and process.poll() is None:
                time.sleep(0.05)
            if process.poll() is not None:
                break
        # the leader is gone; children of a group that ignored SIGTERM get SIGKILL too
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, signal.SIGKILL)
        self._exited(process.wait(), stopped=not restart)

    # ---- status and events -------------------------------------------------------------

    def _wait(self, reason: str, message: str) -> None:
        self.state.waiting_reason, self.state.waiting_message = reason, message
        if reason == "ProcessCapReached":
            self._event(reason, message)

    def _event(self, reason: str, message: str, kind: str = "Warning", once: bool = True) -> None:
        if once and reason in self._events_sent:
            return
        self._events_sent.add(reason)
        self.runner.event(self.pod, reason, message, kind)

    def _push_status(self) -> None:
        if self.gone.is_set():
            return
        body = status.pod_status(self.pod, self.state, self.started_at, now_rfc3339())
        if self._pushed is not None and status.comparable(body) == status.comparable(self._pushed):
            return
        if self.runner.patch_status(self.pod, body):
            self._pushed = body
