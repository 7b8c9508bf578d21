"""Canary analysis against a real Prometheus (Debian's), scraping an exporter that serves a
stable and a canary track's worker metrics under the labels discovery gives real pods:
a slower canary fails tokensPerSecond on one task group, a canary as fast as stable passes,
no traffic is Inconclusive, a refused query and a stopped Prometheus are Errors with
Prometheus's message."""

from __future__ import annotations

import threading
import time

import pytest
from prometheus_client import CollectorRegistry, Counter, Histogram, start_http_server

from specd.api.spec import AnalysisSpec
from specd.operator.analysis.provider import PrometheusProvider
from specd.operator.analysis.run import run
from specd_dev.cluster import processes
from specd_dev.cluster.handle import wait_for

pytestmark = pytest.mark.prometheus

LABELS = ("namespace", "serving_specd_io_service", "track", "task_group")


class Exporter:
    """Worker-shaped series for two tracks, fed at a steady pace while Prometheus scrapes."""

    def __init__(self) -> None:
        self.registry = CollectorRegistry()
        self.requests = Counter("specd_requests", "", (*LABELS, "outcome"),
                                registry=self.registry)
        self.tpot = Histogram("specd_time_per_output_token_seconds", "", LABELS,
                              buckets=(0.01, 0.02, 0.04, 0.08, 0.16), registry=self.registry)
        self.port = processes.free_ports(1)[0]
        self.server, self.thread = start_http_server(self.port, addr="127.0.0.1",
                                                     registry=self.registry)
        self.stop = threading.Event()
        self.tpot_s: dict[tuple[str, str], float] = {}

    def feed(self) -> None:
        while not self.stop.is_set():
            for (track, group), seconds in self.tpot_s.items():
                labels = ("ns", "svc", track, group)
                self.requests.labels(*labels, "finished").inc(5)
                for _ in range(5):
                    self.tpot.labels(*labels).observe(seconds)
            time.sleep(0.2)

    def close(self) -> None:
        self.stop.set()
        self.server.shutdown()
        self.server.server_close()


@pytest.fixture
def exporter():
    exp = Exporter()
    feeder = threading.Thread(target=exp.feed, daemon=True)
    feeder.start()
    try:
        yield exp
    finally:
        exp.close()
        feeder.join(timeout=5)


ANALYSIS = AnalysisSpec.model_validate({"interval": "30s", "minSamples": 10, "metrics": [
    {"name": "speed", "metric": "tokensPerSecond", "min": 0.9, "byTaskGroup": True}]})


def test_analysis_against_a_real_prometheus(prometheus, exporter) -> None:
    prom = prometheus({"workers": [f"127.0.0.1:{exporter.port}"]})
    prom.wait_for_targets_up()
    provider = PrometheusProvider(prom.url)

    # no traffic at all: Inconclusive, never a pass
    measurement, _ = run(ANALYSIS, provider, "ns", "svc")
    assert measurement.verdict == "Inconclusive"

    # the canary as fast as stable on chat, twice as slow on code
    exporter.tpot_s.update({("stable", "chat"): 0.02, ("canary", "chat"): 0.02,
                            ("stable", "code"): 0.02, ("canary", "code"): 0.04})

    def judged() -> tuple | None:
        m, results = run(ANALYSIS, provider, "ns", "svc")
        return (m, results) if len(results) == 2 and all(
            r.verdict != "Inconclusive" for r in results) else None

    measurement, results = wait_for(judged, "both task groups measured", timeout=30)
    by_group = {r.task_group: r for r in results}
    assert by_group["chat"].verdict == "Successful"
    assert by_group["code"].verdict == "Failed"
    assert by_group["code"].value == pytest.approx(0.5, rel=0.05)
    assert measurement.verdict == "Failed" and "speed[code]" in measurement.message

    # a query Prometheus refuses: Error with its message
    bad = AnalysisSpec.model_validate({"metrics": [
        {"name": "typo", "metric": "custom", "query": "sum(rate(", "comparison": "absolute",
         "max": 1}]})
    measurement, results = run(bad, provider, "ns", "svc")
    assert measurement.verdict == "Error" and "bad_data" in results[0].message

    # Prometheus gone: Error naming it, not a verdict on the canary
    prom.stop()
    measurement, results = run(ANALYSIS, provider, "ns", "svc")
    assert measurement.verdict == "Error" and "unreachable" in measurement.message
