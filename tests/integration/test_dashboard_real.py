"""The dashboard against the real thing: the local cluster's API server, real workers (the pod
runner) behind their Service with bounded real traffic, the real Prometheus scraping them,
the operator's real history store, and (last) a real browser.

One service rolls out a canary and waits at a step's pause (two real workers). Then:

1. AppTest, every page over the real clients: the fleet row has live figures (tau, tokens/s
   from Prometheus) and the canary's step; the service page charts tau for both tracks; the
   rollout page shows the steps and, with controls on for a signed-in allowed user, exactly
   the controls a paused rollout takes; the policy and history pages read the store.
2. Chromium (headless, Debian's chromium-driver, Selenium) against ``specd dashboard`` on
   loopback with controls on: the fleet page lists the service; on the rollout page a
   token user on the allow list clicks Abort and confirms in the dialog; the API shows the
   abort, the operator rolls back, and the page shows the rolled-back state. A user not on
   the allow list gets no button; a read-only dashboard shows none.

With ``SPECD_SCREENSHOTS=DIR`` the browser saves a screenshot of every page there
(``docs/dashboard/`` holds the committed ones).
"""

from __future__ import annotations

import os
import subprocess
import sys
import time
from pathlib import Path

import httpx
import pytest
from streamlit.testing.v1 import AppTest

from specd_dev.cluster.handle import wait_for
from specd_dev.testing import Svc, Traffic, free_port, operator_for_namespace

pytestmark = pytest.mark.cluster

ROOT = Path(__file__).resolve().parents[2]
APP = ROOT / "dashboard" / "app.py"
ALICE, BOB = "alice-token-0123456789", "bob-token-0123456789ab"
WORKER = {"image": "specd-worker:dev",
          "resources": {"limits": {"cpu": "1", "memory": "3Gi", "nvidia.com/gpu": 1}}}
SPEC = {"replicas": 1, "model": {"reference": "smollm2-135m", "maxContext": 512},
        "drafter": {"method": "semi-ar", "k": 3},
        "verification": {"mode": "fixed", "fixedLength": 3},
        "engine": {"maxBatch": 2, "queueBound": 16, "extraArgs": ["--cost-profile=none"]},
        "worker": WORKER,
        "rollout": {"strategy": "Canary", "steps": [{"weight": 50, "pause": {}},
                                                    {"weight": 100}],
                    # measured while the step waits (limits high: this module never wants
                    # the analysis to end the rollout, only to show its measurements)
                    "analysis": {"interval": "10s", "minSamples": 3, "failureLimit": 100,
                                 "inconclusiveLimit": 100, "probes": {"maxTokens": 12},
                                 "metrics": [{"name": "speed", "metric": "tokensPerSecond",
                                              "comparison": "relativeToStable", "min": 0.5,
                                              "byTaskGroup": True},
                                             {"name": "errors", "metric": "errorRate",
                                              "comparison": "absolute", "max": 0.0}]}}}


@pytest.fixture(scope="module")
def op(cluster, tmp_path_factory):
    with operator_for_namespace(cluster, tmp_path_factory.mktemp("op"), "dash",
                                extra=("--prometheus-url", cluster.prometheus_url)) as running:
        yield running


@pytest.fixture(scope="module")
def paused_canary(cluster, op):
    """The service mid-canary (paused at its first step, two real workers), with traffic
    flowing the whole module."""
    namespace, _ = op
    svc = Svc(cluster, namespace, "chat")
    svc.create(SPEC)
    svc.wait(lambda s: s.get("phase") == "Ready", "the service Ready")
    url = cluster.service_url(namespace, "chat", ready=1)
    with Traffic(url, concurrency=2, max_tokens=12) as traffic:
        svc.patch({"spec": {"engine": {**SPEC["engine"], "queueBound": 24}}})
        svc.wait(lambda s: (s.get("rollout") or {}).get("phase") == "Paused"
                 and (s.get("rollout") or {}).get("pauseReason") == "StepPause",
                 "the canary paused at its step")
        time.sleep(40)  # several scrapes of both tracks under traffic
        yield svc
    assert traffic.failed == 0, traffic.failures()


def app_env(cluster, op, monkeypatch, *, controls: bool) -> None:
    namespace, operator = op
    monkeypatch.setenv("KUBECONFIG", str(cluster.kubeconfig))
    monkeypatch.setenv("SPECD_PROMETHEUS_URL", cluster.prometheus_url)
    monkeypatch.setenv("SPECD_HISTORY_URL", operator.history_url)
    monkeypatch.setenv("SPECD_DASHBOARD_NAMESPACES", namespace)
    monkeypatch.setenv("SPECD_DASHBOARD_CONTROLS", "enabled" if controls else "disabled")
    monkeypatch.setenv("SPECD_DASHBOARD_ALLOWED_USERS", "alice")
    monkeypatch.setenv("SPECD_DASHBOARD_TOKENS", f"alice={ALICE},bob={BOB}")


def page(script: str) -> AppTest:
    at = AppTest.from_string(script, default_timeout=120).run()
    assert not at.exception, at.exception
    return at


def test_every_page_over_the_real_clients(cluster, op, paused_canary, monkeypatch) -> None:
    namespace, _ = op
    app_env(cluster, op, monkeypatch, controls=True)
    prelude = "import specd.dashboard.app as app\n"

    fleet = page(prelude + "app.fleet_page()")
    (frame,) = fleet.dataframe
    rows = frame.value.to_dict("records")
    (row,) = [r for r in rows if r["service"] == "chat"]
    assert (row["namespace"], row["step"], row["rollout"]) == (namespace, "1/2", "Paused")
    assert row["phase"] in ("Ready", "Progressing") and row["weight set/actual"] == "50/50"
    assert row["τ"] != "no data" and float(row["τ"]) >= 1.0, row
    assert row["tokens/s"] != "no data" and float(row["tokens/s"]) > 0, row
    assert any("Prometheus queries this refresh: 6" in c.value for c in fleet.caption)

    service = AppTest.from_string(prelude + "app.service_page()", default_timeout=120)
    service.query_params.update({"ns": namespace, "name": "chat", "w": "5m"})
    service.run()
    assert not service.exception, service.exception
    assert not service.warning, [w.value for w in service.warning]
    # both tracks have tau; per-position acceptance and phase shares have data
    assert len([i for i in service.info if i.value == "no data in this window"]) < 9

    rollout = AppTest.from_string(prelude + "app.rollout_page()", default_timeout=120)
    rollout.query_params.update({"ns": namespace, "name": "chat"})
    rollout.run()
    rollout.text_input(key="token").input(ALICE).run()
    assert not rollout.exception, rollout.exception
    enabled = {b.key.removeprefix("act-") for b in rollout.button
               if (b.key or "").startswith("act-") and not b.disabled}
    assert enabled == {"promote", "promote-full", "resume", "abort"}
    rollout.text_input(key="token").input(BOB).run()
    assert not [b for b in rollout.button if (b.key or "").startswith("act-")]

    for script in ("app.policy_page()", "app.history_page()"):
        other = AppTest.from_string(prelude + script, default_timeout=120)
        other.query_params.update({"ns": namespace, "name": "chat"})
        other.run()
        assert not other.exception, other.exception
        assert not other.warning, [w.value for w in other.warning]  # the store was read


class Dashboard:
    """``specd dashboard`` in a subprocess on loopback."""

    def __init__(self, cluster, op, tmp_path: Path, *, controls: bool) -> None:
        namespace, operator = op
        self.port = free_port()
        env = {**os.environ, "HOME": str(tmp_path), "KUBECONFIG": str(cluster.kubeconfig),
               "SPECD_DASHBOARD_CONTROLS": "enabled" if controls else "disabled",
               "SPECD_DASHBOARD_ALLOWED_USERS": "alice",
               "SPECD_DASHBOARD_TOKENS": f"alice={ALICE},bob={BOB}"}
        self.log = (tmp_path / f"dashboard-{self.port}.log").open("wb")
        self.process = subprocess.Popen(
            [sys.executable, "-m", "specd.cli", "dashboard", "--address", "127.0.0.1",
             "--port", str(self.port), "-n", namespace, "--prometheus-url",
             cluster.prometheus_url, "--history-url", operator.history_url,
             "--refresh", "5"], env=env, stdout=self.log, stderr=subprocess.STDOUT)
        self.url = f"http://127.0.0.1:{self.port}"

        def healthy() -> bool:
            assert self.process.poll() is None, "specd dashboard exited"
            try:
                return httpx.get(f"{self.url}/_stcore/health", timeout=2).status_code == 200
            except httpx.HTTPError:
                return False
        wait_for(healthy, "specd dashboard healthy", timeout=90)

    def stop(self) -> None:
        self.process.terminate()
        self.process.wait(timeout=30)
        self.log.close()


@pytest.fixture
def browser():
    from specd_dev.browser import chromium

    driver = chromium()
    yield driver
    driver.quit()


def find_text(driver, text: str, timeout: float = 60):
    from selenium.webdriver.common.by import By
    from selenium.webdriver.support import expected_conditions as ec
    from selenium.webdriver.support.ui import WebDriverWait

    return WebDriverWait(driver, timeout).until(ec.presence_of_element_located(
        (By.XPATH, f"//*[contains(normalize-space(.), {text!r}) and not(*[contains("
                   f"normalize-space(.), {text!r})])]")))


def buttons(driver, label: str) -> list:
    """The visible buttons labelled ``label`` (none while the page redraws under us)."""
    from selenium.common.exceptions import StaleElementReferenceException
    from selenium.webdriver.common.by import By

    try:
        return [b for b in driver.find_elements(By.TAG_NAME, "button")
                if b.text.strip() == label and b.is_displayed()]
    except StaleElementReferenceException:
        return []


def shot(driver, name: str) -> None:
    folder = os.environ.get("SPECD_SCREENSHOTS")
    if folder:
        Path(folder).mkdir(parents=True, exist_ok=True)
        time.sleep(3)  # the charts finish drawing
        driver.save_screenshot(str(Path(folder) / f"{name}.png"))


def test_abort_in_a_real_browser(cluster, op, paused_canary, browser, tmp_path) -> None:
    from selenium.webdriver.common.by import By
    from selenium.webdriver.common.keys import Keys

    namespace, _ = op
    svc = paused_canary
    read_only = Dashboard(cluster, op, tmp_path, controls=False)
    try:
        browser.get(f"{read_only.url}/rollout?ns={namespace}&name=chat")
        find_text(browser, "read-only: controls are off")
        assert not buttons(browser, "Abort")
    finally:
        read_only.stop()

    dashboard = Dashboard(cluster, op, tmp_path, controls=True)
    try:
        browser.get(f"{dashboard.url}/")  # the fleet page is the default, at the root
        find_text(browser, "Fleet")
        find_text(browser, "services, 0 needing attention")
        shot(browser, "fleet")
        browser.get(f"{dashboard.url}/service?ns={namespace}&name=chat&w=5m")
        find_text(browser, "acceptance by draft position")
        shot(browser, "service")
        for name in ("policy", "history"):
            browser.get(f"{dashboard.url}/{name}?ns={namespace}&name=chat")
            find_text(browser, name.capitalize())
            shot(browser, name)

        browser.get(f"{dashboard.url}/rollout?ns={namespace}&name=chat")
        token = find_text(browser, "access token")  # the sidebar's sign-in

        def sign_in(secret: str) -> None:  # found afresh: each rerun redraws the input
            field = browser.find_element(By.CSS_SELECTOR, "input[type='password']")
            field.send_keys(Keys.CONTROL, "a")
            field.send_keys(Keys.DELETE)
            field.send_keys(secret + Keys.ENTER)

        sign_in(BOB)
        find_text(browser, "bob is not allowed to act")
        assert not buttons(browser, "Abort")
        sign_in(ALICE)
        wait_for(lambda: buttons(browser, "Abort"), "the Abort button", timeout=60)
        shot(browser, "rollout")
        buttons(browser, "Abort")[0].click()
        dialog = find_text(browser, "roll back: the stable track takes all traffic again")
        assert token is not None and dialog is not None
        confirm = [b for b in browser.find_elements(By.CSS_SELECTOR, "[role='dialog'] button")
                   if b.text.strip() == "Abort"]
        assert confirm, "the dialog's Abort"
        confirm[0].click()
        find_text(browser, f"Abort sent for {namespace}/chat as dashboard:alice")
        obj = svc.custom.get_namespaced_custom_object(
            "serving.specd.io", "v1alpha1", namespace, "speculativeservices", "chat")
        assert obj["spec"]["rollout"]["abort"] is True
        assert obj["metadata"]["annotations"]["serving.specd.io/last-action-by"] == \
            "dashboard:alice"
        svc.wait(lambda s: (s.get("rollout") or {}).get("phase") == "RolledBack",
                 "the operator to roll back", timeout=120)
        browser.refresh()
        find_text(browser, "Rolled back:", timeout=60)
        shot(browser, "rollout-rolled-back")
    finally:
        dashboard.stop()
