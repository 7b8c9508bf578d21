"""pytest fixtures for a real local Kubernetes cluster and real Prometheus servers.

Registered from tests/conftest.py (``pytest_plugins = ["specd_dev.cluster.pytest_plugin"]``).

``cluster`` (session): a running :class:`~specd_dev.cluster.handle.LocalCluster` — etcd,
kube-apiserver, kube-controller-manager, kube-scheduler and kwok on 127.0.0.1, with two fake
nodes advertising cpu 32, memory 256Gi and ``nvidia.com/gpu: 8`` (kwok makes pods on them
Running/Ready; deleted pods go away), plus the pod runner (specd's own pods -- a container
command ``specd serve|operator|dashboard`` -- run as real processes, Ready from their own
readiness probe), HAProxy (a loopback URL per Service) and Prometheus scraping the runner's
pods. Started once per session in a temporary state directory (building the binaries first if
the cache is empty), stopped at the end::

    def test_x(cluster):
        cluster.kubeconfig                  # Path of an admin kubeconfig
        cluster.env                         # os.environ + KUBECONFIG, our kubectl/helm first
        api = kubernetes.client.CoreV1Api(cluster.api_client())
        cluster.kubectl("apply", "-f", "-", input=manifest)   # CompletedProcess, check=True
        cluster.helm("install", "rel", chart_dir, "-n", ns)
        cluster.service_account_kubeconfig(ns, "my-operator")   # act with only its RBAC
        cluster.service_url(ns, "svc")      # http://127.0.0.1:PORT over the Ready pods
        cluster.prometheus_url              # the cluster's Prometheus (kubernetes_sd labels)
        cluster.runner_state().pod(ns, "p") # the runner's record: pid, ports, ready
        cluster.pod_log(ns, "p")            # a runner pod's log

RBAC is enforced (``--authorization-mode=RBAC``); the admin kubeconfig is ``system:masters``.

``cluster_namespace`` (function): a fresh namespace name in ``cluster``, deleted afterwards.

``prometheus`` (function): a factory starting Debian's Prometheus scraping loopback targets
every second; every server it started is stopped (and its data removed) after the test::

    def test_y(prometheus):
        prom = prometheus({"worker": ["127.0.0.1:9400"]})     # or ["127.0.0.1:9400"]
        prom.wait_for_targets_up()
        prom.client().custom_query("up")                      # PrometheusConnect

``wait_for(condition, what, timeout)`` (from ``specd_dev.cluster.handle``) polls until truthy.
"""

from __future__ import annotations

import sys
import uuid
from collections.abc import Callable, Iterator
from typing import Any

import pytest

from specd_dev.cluster.handle import LocalCluster
from specd_dev.cluster.prometheus import Prometheus


def _progress(line: str) -> None:
    # Shown even under output capture: the first build takes many minutes.
    print(line, file=sys.__stderr__, flush=True)


@pytest.fixture(scope="session")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[LocalCluster]:
    from specd_dev.cluster import control_plane

    state_dir = tmp_path_factory.mktemp("specd-cluster")
    handle = control_plane.up(state_dir, name="specd-test", timeout=180, progress=_progress)
    try:
        yield handle
    finally:
        control_plane.down(state_dir, progress=_progress)


@pytest.fixture
def cluster_namespace(cluster: LocalCluster) -> Iterator[str]:
    from kubernetes import client

    name = f"t-{uuid.uuid4().hex[:10]}"
    api = client.CoreV1Api(cluster.api_client())
    api.create_namespace({"metadata": {"name": name}})
    try:
        yield name
    finally:
        api.delete_namespace(name)


@pytest.fixture
def prometheus() -> Iterator[Callable[..., Prometheus]]:
    started: list[Prometheus] = []

    def start(targets: Any = (), **options: Any) -> Prometheus:
        server = Prometheus(targets, **options)
        started.append(server)
        return server.start()

    try:
        yield start
    finally:
        for server in started:
            server.stop()
