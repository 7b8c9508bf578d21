"""Operator scale check: N SpeculativeServices on the local cluster, time to all Ready, and
the operator's memory; with ``--canarying M``, M of them then sit mid-canary. Run against a
running local cluster (``specd cluster up``)::

    .venv/bin/python -m specd_dev.bench.operator_scale --services 50 --canarying 10 \\
        --json docs/bench/operator-scale-cpu-DATE.json

The operator runs as its least-privilege ServiceAccount, exactly as in the tests. Workers
ask for CPU only (the fake nodes have 16 GPUs in all, fewer than 50) and stay simulated by
kwok (``LOCAL_POD_RUNNER=simulate``): this times the operator, not model loading.

``--canarying M``: the first M services use ``spec.rollout.strategy: Canary`` with one step
``{weight: 50, pause: {}}`` (paused until promoted). Once all N are Ready, each of the M gets
a pod-changing edit (``spec.engine.queueBound``), so it starts a canary and stops at its
paused step (``status.rollout.phase == "Paused"``) with two Deployments (stable and canary,
one replica each), while the operator's rollout timer ticks every 2 s on each. Reported:
time to all Ready, time from the edits to all M Paused, the operator's RSS (idle, peak, and
over ``--steady`` seconds once all are Paused), status writes, history rows.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import statistics
import subprocess
import sys
import tempfile
import threading
import time
import uuid
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

from kubernetes import client

from specd.api import k8s
from specd_dev.cluster import control_plane
from specd_dev.testing import REPO, OperatorProcess, install_crd, operator_kubeconfig

CANARY_STEPS = [{"weight": 50, "pause": {}}]  # one step, paused until a promote
MERGE = "application/merge-patch+json"


def service(name: str, canary: bool = False) -> dict:
    spec: dict[str, Any] = {
        "replicas": 1, "model": {"reference": "smollm2-135m"},
        "drafter": {"method": "ngram", "k": 4},
        "worker": {"image": "specd-worker:0.1.0",
                   "resources": {"limits": {"cpu": "100m", "memory": "128Mi"}},
                   # times the operator, not model loading: kwok simulates the pods
                   "env": [{"name": "LOCAL_POD_RUNNER", "value": "simulate"}]}}
    if canary:
        spec["rollout"] = {"strategy": "Canary", "steps": CANARY_STEPS}
    return {"apiVersion": k8s.API_VERSION, "kind": k8s.KIND, "metadata": {"name": name},
            "spec": spec}


def _git(*args: str) -> str:
    try:
        return subprocess.run(["git", *args], cwd=REPO, capture_output=True, text=True,
                              check=True).stdout.strip()
    except (OSError, subprocess.CalledProcessError):
        return "?"


def _metric(text: str, name: str) -> float | None:
    """The sum of a Prometheus text metric's samples (all label sets)."""
    values = [float(line.split()[-1]) for line in text.splitlines()
              if line.startswith(name) and (line[len(name):len(name) + 1] in (" ", "{"))]
    return sum(values) if values else None


def _mib(n: float) -> float:
    return round(n / 2**20, 1)


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=50)
    parser.add_argument("--canarying", type=int, default=0, metavar="M",
                        help="M of the services roll out a canary and stay paused mid-way")
    parser.add_argument("--steady", type=float, default=60.0, metavar="SECONDS",
                        help="with --canarying: watch RSS this long once all are Paused")
    parser.add_argument("--name", default="specd", help="local cluster name")
    parser.add_argument("--timeout", type=float, default=600)
    parser.add_argument("--json", type=Path, default=None, help="also write the result here")
    args = parser.parse_args(argv)
    if not 0 <= args.canarying <= args.services:
        parser.error("--canarying must be between 0 and --services")

    cluster = control_plane.running_cluster(args.name)
    install_crd(cluster)
    work = Path(tempfile.mkdtemp(prefix="specd-opbench-"))
    kubeconfig = operator_kubeconfig(cluster, work / "kubeconfig")
    namespace = f"bench-{uuid.uuid4().hex[:8]}"
    api_client = cluster.api_client()
    core, custom = client.CoreV1Api(api_client), client.CustomObjectsApi(api_client)
    apps = client.AppsV1Api(api_client)
    core.create_namespace({"metadata": {"name": namespace}})
    operator = OperatorProcess(kubeconfig, work / "operator.log", namespaces=(namespace,))
    operator.start()
    idle_rss = operator.rss_bytes()
    samples: list[tuple[float, int]] = []  # (monotonic, rss)
    stop = threading.Event()

    def sample_memory() -> None:
        while not stop.is_set():
            try:
                samples.append((time.monotonic(), operator.rss_bytes()))
            except Exception:  # noqa: BLE001 - process gone
                return
            time.sleep(0.2)

    sampler = threading.Thread(target=sample_memory, daemon=True)
    sampler.start()
    names = [f"svc-{i:03d}" for i in range(args.services)]
    canaries = names[:args.canarying]
    result: dict[str, Any] = {}

    def items() -> list[dict[str, Any]]:
        return custom.list_namespaced_custom_object(
            k8s.GROUP, k8s.VERSION, namespace, k8s.PLURAL)["items"]

    load_start = os.getloadavg()
    try:
        start = time.monotonic()
        for name in names:
            custom.create_namespaced_custom_object(k8s.GROUP, k8s.VERSION, namespace,
                                                   k8s.PLURAL, service(name, name in canaries))
        created = time.monotonic() - start
        ready = 0
        while time.monotonic() - start < args.timeout:
            ready = sum(1 for o in items() if (o.get("status") or {}).get("phase") == "Ready"
                        and o["status"].get("readyReplicas") == 1)
            if ready == args.services:
                break
            time.sleep(0.25)
        ready_s = time.monotonic() - start
        ready_at = time.monotonic()
        rss_ready = operator.rss_bytes()
        result["ready"] = {"created_s": round(created, 2), "all_ready_s": round(ready_s, 2),
                           "ready": ready, "rss_bytes_at_ready": rss_ready}
        if canaries and ready == args.services:
            edit = time.monotonic()
            for name in canaries:  # a pod-changing edit: a new revision, so a canary
                custom.patch_namespaced_custom_object(
                    k8s.GROUP, k8s.VERSION, namespace, k8s.PLURAL, name,
                    {"spec": {"engine": {"queueBound": 128}}}, _content_type=MERGE)
            edited = time.monotonic() - edit
            paused: list[str] = []
            while time.monotonic() - edit < args.timeout:
                paused = [o["metadata"]["name"] for o in items()
                          if o["metadata"]["name"] in canaries and
                          ((o.get("status") or {}).get("rollout") or {}).get("phase") == "Paused"]
                if len(paused) == len(canaries):
                    break
                time.sleep(0.25)
            paused_s = time.monotonic() - edit
            paused_at = time.monotonic()
            before = operator.metrics()
            time.sleep(args.steady)  # the rollout timers tick, nothing moves
            steady_end = time.monotonic()
            after = operator.metrics()

            def during(name: str) -> float | None:
                a, b = _metric(after, name), _metric(before, name)
                return None if a is None or b is None else round(a - b, 3)
            objects = {o["metadata"]["name"]: o for o in items()}
            deployments: dict[str, list[str]] = {}
            for dep in apps.list_namespaced_deployment(namespace).items:
                owner = (dep.metadata.labels or {}).get(k8s.LABEL_SERVICE)
                deployments.setdefault(owner, []).append(
                    (dep.metadata.labels or {}).get(k8s.LABEL_TRACK, "?"))
            still = [n for n in canaries if ((objects[n].get("status") or {}).get("rollout")
                                              or {}).get("phase") == "Paused"]
            window = [rss for t, rss in samples if paused_at <= t <= steady_end]
            result["canary"] = {
                "edits_s": round(edited, 2),
                "all_paused_s_from_edits": round(paused_s, 2),
                "paused": len(paused),
                "still_paused_after_steady": len(still),
                "deployments_per_canarying_service": sorted(
                    {len(deployments.get(n, [])) for n in canaries}),
                "tracks": sorted({",".join(sorted(deployments.get(n, []))) for n in canaries}),
                "deployments_per_other_service": sorted(
                    {len(deployments.get(n, [])) for n in names[len(canaries):]}),
                "steady_s": args.steady,
                # what the ticks cost while nothing moves (10 services x 1 tick / 2 s)
                "steady_reconciles": during("specd_operator_reconciles_total"),
                "steady_rollout_reconciles": during(
                    'specd_operator_reconciles_total{result="ok",trigger="rollout"}'),
                "steady_reconcile_seconds_sum": during("specd_operator_reconcile_seconds_sum"),
                "steady_status_writes": during("specd_operator_status_writes_total"),
                "rss_bytes_steady_start": window[0] if window else None,
                "rss_bytes_steady_end": window[-1] if window else None,
                "rss_bytes_steady_max": max(window) if window else None,
                "rss_bytes_steady_median": int(statistics.median(window)) if window else None,
            }
        steady_rss = operator.rss_bytes()
        metrics = operator.metrics()
        wall = time.monotonic() - start
    finally:
        stop.set()
        operator.stop()
        core.delete_namespace(namespace)

    rollouts = None
    if canaries:
        from specd.operator.history.store import HistoryStore

        history = HistoryStore(operator.history_url)
        try:
            rollouts = sum(history.rollout_count(namespace, n) for n in canaries)
        finally:
            history.close()
    peak = max([idle_rss, *(rss for _, rss in samples)])
    peak_to_ready = max([idle_rss, *(rss for t, rss in samples if t <= ready_at)])
    result["operator"] = {
        "rss_bytes_idle": idle_rss, "rss_bytes_peak": peak,
        "rss_bytes_peak_until_ready": peak_to_ready, "rss_bytes_end": steady_rss,
        "status_writes": _metric(metrics, "specd_operator_status_writes_total"),
        "store_write_errors": _metric(metrics, "specd_operator_store_write_errors_total"),
        "history_rollouts_recorded": rollouts, "wall_s": round(wall, 1)}
    dirty = _git("status", "--porcelain", "--untracked-files=no")
    result = {
        "bench": "operator-scale",
        "date": datetime.now(UTC).strftime("%Y-%m-%dT%H:%M:%SZ"),
        "git_commit": _git("rev-parse", "HEAD"),
        "git_dirty_files": dirty.splitlines() if dirty and dirty != "?" else [],
        "settings": {
            "services": args.services, "canarying": args.canarying,
            "replicas_per_service": 1, "canary_steps": CANARY_STEPS if canaries else None,
            "canary_edit": {"spec.engine.queueBound": 128} if canaries else None,
            "rollout_tick_s": 2.0, "resync_s": 300.0, "steady_s": args.steady,
            "workers": "kwok-simulated (LOCAL_POD_RUNNER=simulate), cpu 100m",
            "operator": "specd operator, least-privilege ServiceAccount, SQLite history "
                        "store, one namespace watched",
            "python": platform.python_version(), "cpus": os.cpu_count(),
            "memory_bytes": os.sysconf("SC_PAGE_SIZE") * os.sysconf("SC_PHYS_PAGES"),
            # the machine is shared: its load average (1, 5, 15 min) around the run
            "loadavg_start": [round(x, 2) for x in load_start],
            "loadavg_end": [round(x, 2) for x in os.getloadavg()],
        },
        **result,
    }

    op = result["operator"]
    print(f"services:                 {args.services} (1 CPU worker each, "
          f"{args.canarying} canarying)")
    print(f"created in:               {result['ready']['created_s']:.1f} s")
    print(f"all Ready after:          {result['ready']['all_ready_s']:.1f} s  "
          f"({result['ready']['ready']}/{args.services} Ready)")
    if "canary" in result:
        c = result["canary"]
        print(f"all canaries Paused:      {c['all_paused_s_from_edits']:.1f} s after the edits "
              f"({c['paused']}/{len(canaries)}; Deployments each: "
              f"{c['deployments_per_canarying_service']}, tracks {c['tracks']})")
        if c["rss_bytes_steady_end"] is not None:
            print(f"operator RSS steady:      {_mib(c['rss_bytes_steady_start'])} -> "
                  f"{_mib(c['rss_bytes_steady_end'])} MiB over {args.steady:.0f} s "
                  f"(max {_mib(c['rss_bytes_steady_max'])}, median "
                  f"{_mib(c['rss_bytes_steady_median'])})")
        print(f"during the steady window: {c['steady_reconciles']} reconciles "
              f"({c['steady_rollout_reconciles']} by the rollout timer, "
              f"{c['steady_reconcile_seconds_sum']} s in all), {c['steady_status_writes']} "
              f"status writes")
        print(f"history rollouts:         {rollouts}")
    print(f"operator RSS idle:        {_mib(op['rss_bytes_idle'])} MiB")
    print(f"operator RSS at Ready:    {_mib(result['ready']['rss_bytes_at_ready'])} MiB")
    print(f"operator RSS peak:        {_mib(op['rss_bytes_peak'])} MiB")
    print(f"operator RSS at the end:  {_mib(op['rss_bytes_end'])} MiB")
    print(f"status writes:            {op['status_writes']}")
    if args.json:
        args.json.parent.mkdir(parents=True, exist_ok=True)
        args.json.write_text(json.dumps(result, indent=2) + "\n")
        print(f"wrote {args.json}", file=sys.stderr)
    ok = result["ready"]["ready"] == args.services and (
        not canaries or result.get("canary", {}).get("paused") == len(canaries))
    return 0 if ok else 1


if __name__ == "__main__":
    raise SystemExit(main())
