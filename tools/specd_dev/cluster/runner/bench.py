"""Measure what the pod runner costs: a worker's time to Ready and memory, how many fit on
this machine, and the Service proxy's added latency (direct to the pod vs through the URL,
alternating request by request so machine drift falls on both alike).

    specd cluster up
    python -m specd_dev.cluster.runner.bench [--requests 300] [--json out.json]

The worker is the operator's own pod template for a SpeculativeService with the engine's
default settings (semi-ar drafter on the embedded model), created as a bare Pod with its
policy ConfigMap and a Service, in a namespace of its own that is deleted afterwards.
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client

from specd.api.spec import ServiceSpec
from specd.operator import manifests
from specd_dev.cluster import control_plane
from specd_dev.cluster.handle import wait_for
from specd_dev.cluster.runner import admission
from specd_dev.cluster.runner.runner import memory_available


def peak_rss(pid: int) -> int:
    for line in Path(f"/proc/{pid}/status").read_text().splitlines():
        if line.startswith("VmHWM:"):
            return int(line.split()[1]) * 1024
    return 0


def percentile(values: list[float], q: float) -> float:
    ordered = sorted(values)
    return ordered[min(len(ordered) - 1, int(q * len(ordered)))]


def timed(http: httpx.Client, method: str, url: str, **kw: Any) -> float:
    start = time.perf_counter()
    response = http.request(method, url, **kw)
    response.raise_for_status()
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--name", default="specd", help="local cluster name")
    parser.add_argument("--requests", type=int, default=300,
                        help="requests per route and kind (default 300)")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)
    state_dir = control_plane.default_state_dir(args.name)
    state = control_plane.read_state(state_dir)
    if state is None or not control_plane.is_up(state_dir):
        print("start the local cluster first: specd cluster up", file=sys.stderr)
        return 2
    handle = control_plane.handle_for(state_dir, state)
    core = client.CoreV1Api(handle.api_client())
    namespace = f"runner-bench-{uuid.uuid4().hex[:6]}"
    core.create_namespace({"metadata": {"name": namespace}})
    owner = {"metadata": {"name": "bench", "namespace": namespace, "uid": str(uuid.uuid4())}}
    spec = ServiceSpec.model_validate({
        "model": {"reference": "smollm2-135m"}, "drafter": {"method": "semi-ar", "k": 3},
        "worker": {"image": "specd-worker:dev", "resources": {"limits": {"cpu": "2"}}}})
    try:
        cm = manifests.build_configmap(owner, "stable", spec.policy())
        service = manifests.build_service(owner)
        template = manifests.build_pod_template(owner, spec, "stable", manifests.revision(spec))
        for obj in (cm, service):
            obj["metadata"].pop("ownerReferences")
        core.create_namespaced_config_map(namespace, cm)
        core.create_namespaced_service(namespace, service)
        created = time.monotonic()
        core.create_namespaced_pod(namespace, {"metadata": {"name": "bench-0", **template[
            "metadata"]}, "spec": template["spec"]})

        def ready() -> bool:
            pod = core.read_namespaced_pod("bench-0", namespace)
            return any(c.type == "Ready" and c.status == "True"
                       for c in pod.status.conditions or [])

        wait_for(ready, "the worker Ready", timeout=900, interval=0.5)
        ready_s = time.monotonic() - created
        record = handle.runner_state().pod(namespace, "bench-0")
        rss, hwm = (int(Path(f"/proc/{record['pid']}/status").read_text().split("VmRSS:")[1]
                        .split()[0]) * 1024, peak_rss(record["pid"]))
        direct = f"http://127.0.0.1:{record['ports'][str(manifests.HTTP_PORT)]}"
        proxied = handle.service_url(namespace, "bench")
        wait_for(lambda: httpx.get(f"{proxied}/readyz", timeout=5).status_code == 200,
                 "the Service URL to route", timeout=30)
        body = {"model": "smollm2-135m", "max_tokens": 1, "temperature": 0,
                "messages": [{"role": "user", "content": "Hi"}]}
        results: dict[str, dict[str, list[float]]] = {
            "healthz": {"direct": [], "proxy": []}, "completion": {"direct": [], "proxy": []}}
        with httpx.Client(timeout=60) as http:
            for kind, method, path, kw in (("healthz", "GET", "/healthz", {}),
                                           ("completion", "POST", "/v1/chat/completions",
                                            {"json": body})):
                count = args.requests if kind == "healthz" else max(20, args.requests // 10)
                for index in range(count):
                    order = ("direct", "proxy") if index % 2 == 0 else ("proxy", "direct")
                    for route in order:
                        base = direct if route == "direct" else proxied
                        results[kind][route].append(timed(http, method, base + path, **kw))
        available = memory_available()
        report = {
            "worker": {"ready_s_from_pod_creation": round(ready_s, 1),
                       "rss_bytes_ready": rss, "peak_rss_bytes": hwm,
                       "engine": {"max_slots": spec.engine.max_batch,
                                  "max_context": spec.model.max_context, "drafter": "semi-ar",
                                  "threads": 2}},
            "fit": {"memory_available_bytes_now": available,
                    "workers_that_fit_in_80pct": max(1, int(
                        admission.BUDGET_SHARE * (available + rss)) // hwm)},
            "proxy_latency_ms": {
                kind: {route: {"median": round(1000 * statistics.median(v), 3),
                               "p95": round(1000 * percentile(v, 0.95), 3), "n": len(v)}
                       for route, v in routes.items()}
                for kind, routes in results.items()},
        }
        for routes in report["proxy_latency_ms"].values():
            routes["added_median_ms"] = round(routes["proxy"]["median"]
                                              - routes["direct"]["median"], 3)
            routes["ratio_median"] = round(routes["proxy"]["median"]
                                           / routes["direct"]["median"], 3)
        print(json.dumps(report, indent=2))
        if args.json:
            args.json.parent.mkdir(parents=True, exist_ok=True)
            args.json.write_text(json.dumps(report, indent=2) + "\n")
    finally:
        core.delete_namespace(namespace)
    return 0


if __name__ == "__main__":
    sys.exit(main())
