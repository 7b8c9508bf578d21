"""A real Prometheus scrapes a real prometheus_client exporter on 127.0.0.1, and
prometheus-api-client reads the values back."""

from __future__ import annotations

import pytest
from prometheus_client import CollectorRegistry, Gauge, start_http_server

from specd import SpecdError
from specd_dev.cluster import processes
from specd_dev.cluster.handle import wait_for
from specd_dev.cluster.prometheus import Prometheus, config_yaml, normalise_targets

pytestmark = pytest.mark.prometheus


@pytest.fixture
def exporter():
    """A prometheus_client HTTP exporter on a free loopback port with one labelled gauge."""
    registry = CollectorRegistry()
    gauge = Gauge("specd_test_acceptance", "test gauge", ["pool"], registry=registry)
    port = processes.free_ports(1)[0]
    server, thread = start_http_server(port, addr="127.0.0.1", registry=registry)
    try:
        yield gauge, f"127.0.0.1:{port}"
    finally:
        server.shutdown()
        server.server_close()
        thread.join(timeout=5)


def _value(prom, query: str) -> float | None:
    result = prom.client().custom_query(query)
    return float(result[0]["value"][1]) if result else None


def test_scrapes_exporter_and_api_client_reads_it_back(prometheus, exporter):
    gauge, target = exporter
    gauge.labels(pool="canary").set(0.625)
    prom = prometheus({"worker": [target]})
    prom.wait_for_targets_up()

    query = 'specd_test_acceptance{job="worker",pool="canary"}'
    assert wait_for(lambda: _value(prom, query), "first scraped sample") == 0.625
    # The value follows the exporter: Prometheus really scrapes it again.
    gauge.labels(pool="canary").set(0.25)
    wait_for(lambda: _value(prom, query) == 0.25, "updated sample", timeout=20)
    up = prom.client().custom_query(f'up{{instance="{target}"}}')
    assert up[0]["value"][1] == "1"


def test_targets_can_be_replaced_while_running(prometheus, exporter):
    gauge, target = exporter
    gauge.labels(pool="stable").set(3)
    prom = prometheus([])  # no targets yet, as when the demo starts before the workers
    prom.set_targets({"late": [target]})
    prom.wait_for_targets_up()
    assert wait_for(lambda: _value(prom, 'specd_test_acceptance{job="late"}'),
                    "sample after reload") == 3


def test_stop_frees_port_and_removes_data(exporter):
    _, target = exporter
    prom = Prometheus([target]).start()
    port, workdir = prom.port, prom.workdir
    assert workdir is not None and (workdir / "data").is_dir()
    prom.stop()
    assert not prom.running
    assert processes.port_is_free(port)
    assert not workdir.exists()


@pytest.mark.parametrize("bad", ["10.0.0.5:9400", "example.com:80", "127.0.0.1", "127.0.0.1:x"])
def test_rejects_non_loopback_or_malformed_targets(bad):
    with pytest.raises(SpecdError, match="must be 127.0.0.1:<port>"):
        normalise_targets([bad])


def test_generated_config_has_interval_and_targets():
    text = config_yaml({"worker": ["127.0.0.1:1"]}, "1s")
    assert "scrape_interval: 1s" in text and "127.0.0.1:1" in text and "job_name: worker" in text
