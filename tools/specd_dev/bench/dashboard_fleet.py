"""The dashboard's fleet page at N services: time to the first full render, and the
Prometheus queries one refresh costs. Run against a running local cluster::

    .venv/bin/python -m specd_dev.bench.dashboard_fleet --services 50

N SpeculativeServices are created in a fresh namespace and reconciled to Ready by the real
operator (workers simulated by kwok, as in ``specd_dev.bench.operator_scale``: this times
the dashboard, not model loading). Then ``specd dashboard`` runs on loopback and a headless
Chromium loads the fleet page until every service's row is in the table; the first load
(a cold Streamlit session: clients created, the list and the six fleet queries sent) and
``--loads`` more are timed. The same page is also run in-process by Streamlit's AppTest,
which reports the queries the refresh sent.
"""

from __future__ import annotations

import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile
import time
import uuid
from pathlib import Path
from typing import Any

import httpx
from kubernetes import client

from specd.api import k8s
from specd_dev.bench.operator_scale import service
from specd_dev.browser import chromium
from specd_dev.cluster import control_plane
from specd_dev.cluster.handle import wait_for
from specd_dev.testing import OperatorProcess, free_port, install_crd, operator_kubeconfig


def load_until_rows(driver: Any, url: str, services: int, timeout: float = 120) -> float:
    """Seconds from navigation until the caption counts every service (the table is drawn
    in the same script run)."""
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    start = time.perf_counter()
    driver.get(url)
    WebDriverWait(driver, timeout).until(ec.presence_of_element_located(
        (By.XPATH, f"//*[contains(text(), '{services} services,')]")))
    WebDriverWait(driver, timeout).until(ec.presence_of_element_located(
        (By.CSS_SELECTOR, "[data-testid='stDataFrame']")))
    return time.perf_counter() - start


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--services", type=int, default=50)
    parser.add_argument("--loads", type=int, default=5, help="page loads after the first")
    parser.add_argument("--name", default="specd", help="local cluster name")
    parser.add_argument("--json", type=Path, default=None)
    args = parser.parse_args(argv)

    cluster = control_plane.running_cluster(args.name)
    install_crd(cluster)
    work = Path(tempfile.mkdtemp(prefix="specd-dashbench-"))
    namespace = f"dash-{uuid.uuid4().hex[:8]}"
    api = cluster.api_client()
    core, custom = client.CoreV1Api(api), client.CustomObjectsApi(api)
    core.create_namespace({"metadata": {"name": namespace}})
    operator = OperatorProcess(operator_kubeconfig(cluster, work / "kubeconfig"),
                               work / "operator.log", namespaces=(namespace,))
    operator.start()
    dashboard = None
    result: dict[str, Any] = {"services": args.services}
    try:
        for i in range(args.services):
            custom.create_namespaced_custom_object(k8s.GROUP, k8s.VERSION, namespace,
                                                   k8s.PLURAL, service(f"svc-{i:03d}"))

        def all_ready() -> bool:
            items = custom.list_namespaced_custom_object(k8s.GROUP, k8s.VERSION, namespace,
                                                         k8s.PLURAL)["items"]
            return sum((o.get("status") or {}).get("phase") == "Ready"
                       for o in items) == args.services
        wait_for(all_ready, f"{args.services} services Ready", timeout=600)

        env = {**os.environ, "HOME": str(work), "KUBECONFIG": str(cluster.kubeconfig),
               "SPECD_PROMETHEUS_URL": cluster.prometheus_url,
               "SPECD_DASHBOARD_NAMESPACES": namespace}
        # in-process, as the tests run it: the queries one refresh sends
        from streamlit.testing.v1 import AppTest

        os.environ.update({k: env[k] for k in ("KUBECONFIG", "SPECD_PROMETHEUS_URL",
                                               "SPECD_DASHBOARD_NAMESPACES")})
        started = time.perf_counter()
        at = AppTest.from_string("import specd.dashboard.app as app\napp.fleet_page()",
                                 default_timeout=120).run()
        result["apptest_render_s"] = round(time.perf_counter() - started, 3)
        caption = next(c.value for c in at.caption if "Prometheus queries" in c.value)
        result["apptest_caption"] = caption
        result["prometheus_queries_per_refresh"] = int(caption.rsplit(":", 1)[1])
        result["rows"] = len(at.dataframe[0].value) if at.dataframe else 0

        port = free_port()
        log = (work / "dashboard.log").open("wb")
        dashboard = subprocess.Popen(
            [sys.executable, "-m", "specd.cli", "dashboard", "--address", "127.0.0.1",
             "--port", str(port)], env=env, stdout=log, stderr=subprocess.STDOUT)
        url = f"http://127.0.0.1:{port}"
        def healthy() -> bool:
            if dashboard is None or dashboard.poll() is not None:
                raise SystemExit(f"specd dashboard exited: see {work / 'dashboard.log'}")
            try:
                return httpx.get(f"{url}/_stcore/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False
        wait_for(healthy, "the dashboard", timeout=90)
        driver = chromium()
        try:
            first = load_until_rows(driver, f"{url}/", args.services)
            again = [load_until_rows(driver, f"{url}/", args.services)
                     for _ in range(args.loads)]
        finally:
            driver.quit()
        result["browser_first_render_s"] = round(first, 3)
        result["browser_reload_s"] = [round(t, 3) for t in again]
        result["browser_reload_median_s"] = round(statistics.median(again), 3) if again else None
        result["load_average"] = os.getloadavg()
    finally:
        if dashboard is not None:
            dashboard.terminate()
            dashboard.wait(timeout=30)
        operator.stop()
        core.delete_namespace(namespace)
    print(json.dumps(result, indent=1))
    if args.json:
        args.json.write_text(json.dumps(result, indent=1))
    return 0


if __name__ == "__main__":
    raise SystemExit(main())
