"""``LocalCluster``: what code and tests hold on to for a running local cluster."""

from __future__ import annotations

import os
import subprocess
import time
from collections.abc import Callable
from dataclasses import dataclass
from pathlib import Path
from typing import Any, TypeVar

T = TypeVar("T")


@dataclass(frozen=True)
class LocalCluster:
    name: str
    state_dir: Path
    kubeconfig: Path
    bin_dir: Path
    server: str  # https://127.0.0.1:<port>

    @property
    def env(self) -> dict[str, str]:
        """Environment for subprocesses: KUBECONFIG set, our kubectl/helm first on PATH, helm's
        cache and config kept inside the cluster's state directory."""
        env = dict(os.environ)
        env["KUBECONFIG"] = str(self.kubeconfig)
        env["PATH"] = f"{self.bin_dir}{os.pathsep}{env.get('PATH', '')}"
        helm_home = self.state_dir / "helm"
        env["HELM_CACHE_HOME"] = str(helm_home / "cache")
        env["HELM_CONFIG_HOME"] = str(helm_home / "config")
        env["HELM_DATA_HOME"] = str(helm_home / "data")
        return env

    def api_client(self) -> Any:
        """A fresh ``kubernetes.client.ApiClient`` for this cluster (admin credentials)."""
        from kubernetes import config

        return config.new_client_from_config(config_file=str(self.kubeconfig))

    def service_account_kubeconfig(self, namespace: str, name: str,
                                   expiration_seconds: int = 3600) -> Path:
        """A kubeconfig acting as ServiceAccount ``namespace/name`` (a TokenRequest token),
        to check least-privilege RBAC: run an operator or kubectl with exactly its rights."""
        import yaml
        from kubernetes import client

        core = client.CoreV1Api(self.api_client())
        token = core.create_namespaced_service_account_token(
            name, namespace, {"spec": {"expirationSeconds": expiration_seconds}}).status.token
        config = yaml.safe_load(self.kubeconfig.read_text())
        user = f"system:serviceaccount:{namespace}:{name}"
        config["users"] = [{"name": user, "user": {"token": token}}]
        context = config["contexts"][0]["context"]
        context.update(user=user, namespace=namespace)
        path = self.state_dir / "service-accounts" / f"{namespace}.{name}.kubeconfig"
        path.parent.mkdir(parents=True, exist_ok=True)
        fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
        with os.fdopen(fd, "w") as handle:
            yaml.safe_dump(config, handle, sort_keys=False)
        return path

    # ---- the pod runner, the Service proxy and Prometheus --------------------------------

    def runner_state(self) -> Any:
        """What the pod runner publishes (``specd_dev.cluster.runner.state.RunnerState``) or None."""
        from specd_dev.cluster.runner import state

        return state.read(self.state_dir)

    def service_url(self, namespace: str, name: str, port: str | None = None,
                    timeout: float = 30.0, ready: int = 0) -> str:
        """The loopback URL balancing over the Service's Ready endpoints (HAProxy); with
        ``ready``, once HAProxy routes to at least that many Ready pods (EndpointSlices
        follow pod readiness with a lag)."""
        def url() -> str | None:
            published = self.runner_state()
            if published is None or published.ready_backends(namespace, name, port) < ready:
                return None
            return published.url(namespace, name, port)

        return wait_for(url, f"a URL for service {namespace}/{name}", timeout=timeout)

    @property
    def pod_address_map(self) -> Path:
        """The runner's "podIP:port" -> loopback map (``specd operator --pod-address-map``)."""
        from specd_dev.cluster.runner.runner import ADDRESSES_FILE

        return self.state_dir / "runner" / ADDRESSES_FILE

    @property
    def prometheus_url(self) -> str:
        """The cluster's Prometheus, scraping every pod the runner runs (kubernetes_sd labels)."""
        import json

        ports = json.loads((self.state_dir / "state.json").read_text())["ports"]
        return f"http://127.0.0.1:{ports['prometheus']}"

    def pod_log(self, namespace: str, pod: str) -> str:
        from specd_dev.cluster.runner import state

        return state.pod_log(self.state_dir, namespace, pod).read_text(errors="replace")

    def _tool(self, tool: str, args: tuple[str, ...], input: str | None, check: bool,
              timeout: float) -> subprocess.CompletedProcess[str]:
        result = subprocess.run([str(self.bin_dir / tool), *args], input=input, text=True,
                                capture_output=True, env=self.env, timeout=timeout)
        if check and result.returncode != 0:
            raise subprocess.CalledProcessError(result.returncode, result.args, result.stdout,
                                                result.stderr)
        return result

    def kubectl(self, *args: str, input: str | None = None, check: bool = True,
                timeout: float = 60.0) -> subprocess.CompletedProcess[str]:
        """Run the kubectl built with the cluster (same minor), text in and out."""
        return self._tool("kubectl", args, input, check, timeout)

    def helm(self, *args: str, input: str | None = None, check: bool = True,
             timeout: float = 120.0) -> subprocess.CompletedProcess[str]:
        return self._tool("helm", args, input, check, timeout)


def wait_for(condition: Callable[[], T], what: str, timeout: float = 30.0,
             interval: float = 0.2) -> T:
    """Poll ``condition`` until it returns something truthy; TimeoutError naming ``what``."""
    deadline = time.monotonic() + timeout
    last: T = condition()
    while not last:
        if time.monotonic() > deadline:
            raise TimeoutError(f"timed out after {timeout:.0f}s waiting for {what}")
        time.sleep(interval)
        last = condition()
    return last
