"""Operator scale check: N SpeculativeServices on the local cluster, time to all Ready, and
the operator's memory. Run against a running local cluster (``specd cluster up``)::

    .venv/bin/python -m specd.operator.bench --services 50

The operator runs as its least-privilege ServiceAccount, exactly as in the tests. Workers
ask for CPU only (the fake nodes have 16 GPUs in all, fewer than 50).
"""

from __future__ import annotations

import argparse
import tempfile
import threading
import time
import uuid
from pathlib import Path

from kubernetes import client

from specd.api import k8s
from specd.cluster import control_plane
from specd.operator.testing import OperatorProcess, install_crd, operator_kubeconfig


def service(name: str) -> dict:
    return {
        "apiVersion": k8s.API_VERSION, "kind": k8s.KIND, "metadata": {"name": name},
        "spec": {"replicas": 1, "model": {"reference": "smollm2-135m"},
                 "drafter": {"method": "ngram", "k": 4},
                 "worker": {"image": "specd-worker:0.1.0",
                            "resources": {"limits": {"cpu": "100m", "memory": "128Mi"}},
                            # times the operator, not model loading: kwok simulates the pods
                            "env": [{"name": "LOCAL_POD_RUNNER", "value": "simulate"}]}},
    }


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=50)
    parser.add_argument("--name", default="specd", help="local cluster name")
    parser.add_argument("--timeout", type=float, default=600)
    args = parser.parse_args(argv)

    state_dir = control_plane.default_state_dir(args.name)
    state = control_plane.read_state(state_dir)
    if state is None or not control_plane.is_up(state_dir):
        raise SystemExit(f"cluster '{args.name}' is not running: specd cluster up")
    cluster = control_plane.handle_for(state_dir, state)
    install_crd(cluster)
    work = Path(tempfile.mkdtemp(prefix="specd-opbench-"))
    kubeconfig = operator_kubeconfig(cluster, work / "kubeconfig")
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    api_client = cluster.api_client()
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    core.create_namespace({"metadata": {"name": namespace}})
    operator = OperatorProcess(kubeconfig, work / "operator.log", namespaces=(namespace,))
    operator.start()
    idle_rss = operator.rss_bytes()
    peak = [idle_rss]
    stop = threading.Event()

    def sample_memory() -> None:
        while not stop.is_set():
            try:
                peak[0] = max(peak[0], operator.rss_bytes())
            except Exception:  # noqa: BLE001 - process gone
                return
            time.sleep(0.2)

    sampler = threading.Thread(target=sample_memory, daemon=True)
    sampler.start()
    try:
        start = time.monotonic()
        for i in range(args.services):
            custom.create_namespaced_custom_object(k8s.GROUP, k8s.VERSION, namespace,
                                                   k8s.PLURAL, service(f"svc-{i:03d}"))
        created = time.monotonic() - start
        ready = 0
        while time.monotonic() - start < args.timeout:
            items = custom.list_namespaced_custom_object(
                k8s.GROUP, k8s.VERSION, namespace, k8s.PLURAL)["items"]
            ready = sum(1 for o in items if (o.get("status") or {}).get("phase") == "Ready"
                        and o["status"].get("readyReplicas") == 1)
            if ready == args.services:
                break
            time.sleep(0.25)
        elapsed = time.monotonic() - start
        steady_rss = operator.rss_bytes()
        metrics = operator.metrics()
    finally:
        stop.set()
        operator.stop()
        core.delete_namespace(namespace)
    writes = next((line.split()[-1] for line in metrics.splitlines()
                   if line.startswith("specd_operator_status_writes_total")), "?")
    print(f"services:                 {args.services} (1 CPU worker each)")
    print(f"created in:               {created:.1f} s")
    print(f"all Ready after:          {elapsed:.1f} s  ({ready}/{args.services} Ready)")
    print(f"operator RSS idle:        {idle_rss / 2**20:.0f} MiB")
    print(f"operator RSS peak:        {peak[0] / 2**20:.0f} MiB")
    print(f"operator RSS after:       {steady_rss / 2**20:.0f} MiB")
    print(f"status writes:            {writes}")
    return 0 if ready == args.services else 1


if __name__ == "__main__":
    raise SystemExit(main())
