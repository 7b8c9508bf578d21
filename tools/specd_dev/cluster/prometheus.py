"""A real Prometheus (Debian's ``/usr/bin/prometheus``) for tests and the demo.

    from specd_dev.cluster.prometheus import Prometheus

    with Prometheus({"worker": ["127.0.0.1:9400"]}, scrape_interval="1s") as prom:
        prom.wait_for_targets_up()
        prom.client().custom_query("up")        # prometheus_api_client.PrometheusConnect

It listens on a free 127.0.0.1 port, keeps its TSDB in its own temporary directory (removed on
``stop``), scrapes only loopback targets, and can be re-pointed at new targets while running
(``set_targets``, which rewrites the config and reloads it).
"""

from __future__ import annotations

import shutil
import tempfile
import time
import urllib.error
import urllib.request
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import yaml

from specd import SpecdError
from specd_dev.cluster import processes
from specd_dev.cluster.processes import LOOPBACK, Started

DEFAULT_BINARY = "/usr/bin/prometheus"
LOOPBACK_HOSTS = {"127.0.0.1", "localhost", "[::1]"}

Targets = Mapping[str, Sequence[str]] | Sequence[str]


def normalise_targets(targets: Targets) -> dict[str, list[str]]:
    """``["127.0.0.1:9400"]`` or ``{"job": [...]}`` -> ``{"job": [...]}``; loopback only."""
    jobs = {"specd": list(targets)} if not isinstance(targets, Mapping) else {
        str(job): list(addresses) for job, addresses in targets.items()}
    for job, addresses in jobs.items():
        if not job or not job.replace("_", "").replace("-", "").isalnum():
            raise SpecdError(f"bad Prometheus job name {job!r} (letters, digits, - and _)")
        for address in addresses:
            host, _, port = address.rpartition(":")
            if host not in LOOPBACK_HOSTS or not port.isdigit():
                raise SpecdError(f"scrape target {address!r} must be 127.0.0.1:<port> "
                                 "(Prometheus here scrapes loopback only)")
    return jobs


def config_yaml(jobs: Mapping[str, Sequence[str]], scrape_interval: str,
                metrics_path: str = "/metrics") -> str:
    config = {
        "global": {"scrape_interval": scrape_interval, "scrape_timeout": scrape_interval,
                   "evaluation_interval": scrape_interval},
        "scrape_configs": [
            {"job_name": job, "metrics_path": metrics_path,
             "static_configs": [{"targets": list(addresses)}]}
            for job, addresses in jobs.items()
        ],
    }
    return yaml.safe_dump(config, sort_keys=False)


def server_argv(binary: str, config: Path, data: Path, port: int) -> list[str]:
    """Prometheus on 127.0.0.1:``port`` with lifecycle reloads and a one-day local TSDB."""
    return [
        binary, f"--config.file={config}", f"--storage.tsdb.path={data}",
        f"--web.listen-address={LOOPBACK}:{port}",
        "--web.enable-lifecycle", "--storage.tsdb.retention.time=1d",
        "--log.level=warn",
    ]


class Prometheus:
    def __init__(self, targets: Targets = (), *, scrape_interval: str = "1s",
                 metrics_path: str = "/metrics", binary: str = DEFAULT_BINARY,
                 port: int | None = None) -> None:
        self.jobs = normalise_targets(targets)
        self.scrape_interval = scrape_interval
        self.metrics_path = metrics_path
        self.binary = binary
        self.port = port
        self.workdir: Path | None = None
        self._process: Started | None = None

    @property
    def url(self) -> str:
        if self.port is None:
            raise SpecdError("Prometheus is not started")
        return f"http://{LOOPBACK}:{self.port}"

    @property
    def log(self) -> Path | None:
        return self.workdir / "prometheus.log" if self.workdir else None

    def _write_config(self) -> Path:
        assert self.workdir is not None
        path = self.workdir / "prometheus.yml"
        path.write_text(config_yaml(self.jobs, self.scrape_interval, self.metrics_path))
        return path

    def start(self, timeout: float = 30.0) -> Prometheus:
        if self._process is not None:
            return self
        if not Path(self.binary).is_file():
            raise SpecdError(f"{self.binary} not found: install Debian's 'prometheus' package "
                             "(make apt)")
        self.workdir = Path(tempfile.mkdtemp(prefix="specd-prometheus-"))
        self.port = self.port or processes.free_ports(1)[0]
        config = self._write_config()
        argv = server_argv(self.binary, config, self.workdir / "data", self.port)
        assert self.log is not None
        _, self._process = processes.start("prometheus", argv, self.log, cwd=self.workdir)
        deadline = time.monotonic() + timeout
        while not self._ready():
            if not processes.is_alive(self._process.pid, self._process.start_ticks):
                self._fail("exited before becoming ready")
            if time.monotonic() > deadline:
                self._fail(f"was not ready within {timeout:.0f}s")
            time.sleep(0.1)
        return self

    def _fail(self, reason: str) -> None:
        log = self.log
        tail = processes.log_tail(log) if log else ""
        self.stop(keep_log=True)
        raise SpecdError(f"prometheus {reason}; log: {log}\n{tail}")

    def _ready(self) -> bool:
        try:
            with urllib.request.urlopen(f"{self.url}/-/ready", timeout=1) as response:
                return response.status == 200
        except (OSError, urllib.error.URLError):
            return False

    def set_targets(self, targets: Targets) -> None:
        """Replace the scrape targets of a running server (rewrite config, POST /-/reload)."""
        self.jobs = normalise_targets(targets)
        if self._process is None:
            return
        self._write_config()
        request = urllib.request.Request(f"{self.url}/-/reload", method="POST")
        with urllib.request.urlopen(request, timeout=10) as response:
            if response.status != 200:
                raise SpecdError(f"prometheus reload failed: HTTP {response.status}")

    def targets(self) -> list[dict[str, Any]]:
        """The active targets as Prometheus reports them (``/api/v1/targets``)."""
        import json

        with urllib.request.urlopen(f"{self.url}/api/v1/targets?state=active",
                                    timeout=5) as response:
            return json.load(response)["data"]["activeTargets"]

    def wait_for_targets_up(self, timeout: float = 30.0) -> None:
        """Block until every configured target has been scraped successfully."""
        wanted = {address for addresses in self.jobs.values() for address in addresses}
        deadline = time.monotonic() + timeout
        while True:
            up = {t["labels"].get("instance") for t in self.targets() if t["health"] == "up"}
            if wanted <= up:
                return
            if time.monotonic() > deadline:
                raise SpecdError(f"prometheus targets not up within {timeout:.0f}s: "
                                 f"{sorted(wanted - up)} (log: {self.log})")
            time.sleep(0.2)

    def client(self) -> Any:
        """A ``prometheus_api_client.PrometheusConnect`` for this server."""
        from prometheus_api_client import PrometheusConnect

        return PrometheusConnect(url=self.url, disable_ssl=True)

    def stop(self, keep_log: bool = False) -> None:
        """Stop the server and remove its data (the whole work dir unless ``keep_log``)."""
        if self._process is not None:
            processes.stop(self._process)
            self._process = None
        if self.workdir is not None and not keep_log:
            shutil.rmtree(self.workdir, ignore_errors=True)
            self.workdir = None

    @property
    def running(self) -> bool:
        return self._process is not None and processes.is_alive(
            self._process.pid, self._process.start_ticks)

    def __enter__(self) -> Prometheus:
        return self.start()

    def __exit__(self, *exc: object) -> None:
        self.stop()
