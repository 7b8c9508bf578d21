"""The server's Prometheus metrics, in the registry the engine also writes to.

One registry serves ``/metrics``. The engine registers its round-level metrics (rounds,
drafted/verified/accepted tokens, phase times, ...) there first; the server adds the
request-level ones it alone sees (latency, time to first token, rejects with 4xx, policy
reload errors). A name the engine already registered is the engine's: the server then leaves
it alone instead of counting twice. Engine gauges the engine does not export (queue depth,
batch size, KV usage, the policy info) are read from ``engine.stats()`` at scrape time.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable
from typing import Any

from prometheus_client import CollectorRegistry, Counter, Histogram
from prometheus_client.core import GaugeMetricFamily
from prometheus_client.registry import Collector

from specd.api import metrics as names

LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.0, 4.0, 8.0, 16.0, 32.0, 64.0, 128.0)
# steps of sqrt(2): canary analysis compares p95 TPOT between tracks by ratio (a max of 1.5,
# say), and with doubling buckets one request crossing a boundary moved the ratio by ~2x
TOKEN_TIME_BUCKETS = (0.005, 0.007, 0.01, 0.014, 0.02, 0.028, 0.04, 0.057, 0.08, 0.113, 0.16,
                      0.226, 0.32, 0.453, 0.64, 0.905, 1.28, 2.56)
WORKER_LABELS = (names.LABEL_REVISION, names.LABEL_TRACK)


def registered_names(registry: CollectorRegistry) -> set[str]:
    """Every sample-family name already in ``registry`` (``_total`` stripped as well)."""
    found: set[str] = set()
    for metric in registry.collect():
        found.add(metric.name)
        if metric.type == "counter":
            found.add(metric.name.removesuffix("_total"))
    return found


def _collector(registry: CollectorRegistry, name: str) -> Any:
    """The collector registered under ``name`` (prometheus_client keeps this map privately)."""
    return getattr(registry, "_names_to_collectors", {}).get(name)


class _Noop:
    """Stands in for a metric the engine owns: observing it would count twice."""

    def labels(self, *args: Any, **kwargs: Any) -> _Noop:
        return self

    def inc(self, *args: Any) -> None:
        pass

    def observe(self, *args: Any) -> None:
        pass


class ServerMetrics:
    """Request-level metrics; ``revision`` and ``track`` label every series."""

    def __init__(self, registry: CollectorRegistry, revision: str, track: str,
                 stats: Callable[[], Any] | None = None) -> None:
        self.registry = registry
        self.worker = {names.LABEL_REVISION: revision, names.LABEL_TRACK: track}
        taken = registered_names(registry)
        self.owned: set[str] = set()

        def counter(name: str, doc: str, labels: tuple[str, ...]) -> Any:
            if name in taken:
                return _Noop()
            self.owned.add(name)
            return Counter(name, doc, (*WORKER_LABELS, *labels), registry=registry)

        def histogram(name: str, doc: str, labels: tuple[str, ...], buckets: tuple) -> Any:
            if name in taken:
                return _Noop()
            self.owned.add(name)
            return Histogram(name, doc, (*WORKER_LABELS, *labels), buckets=buckets,
                             registry=registry)

        group = (names.LABEL_TASK_GROUP,)
        self.requests = counter(names.REQUESTS, "requests by outcome "
                                "(finished|cancelled|rejected|error)", ("outcome", *group))
        self.latency = histogram(names.REQUEST_LATENCY_SECONDS,
                                 "request latency, arrival to last token", group, LATENCY_BUCKETS)
        self.ttft = histogram(names.TIME_TO_FIRST_TOKEN_SECONDS,
                              "time from arrival to the first token", group, LATENCY_BUCKETS)
        self.tpot = histogram(names.TIME_PER_OUTPUT_TOKEN_SECONDS,
                              "decode time per output token after the first", group,
                              TOKEN_TIME_BUCKETS)
        self.reload_errors = counter(names.POLICY_RELOAD_ERRORS,
                                     "policy documents refused (the old policy stayed)", ())
        self.http_rejects = counter("specd_http_rejections",
                                    "requests answered with a 4xx/5xx before generation",
                                    ("status",))
        # The engine counts the requests it ran (finished/cancelled/error) in its own
        # specd_requests; only the server sees rejections, so it adds outcome="rejected" there.
        self._engine_requests = _collector(registry, names.REQUESTS) \
            if names.REQUESTS not in self.owned else None
        if stats is not None:
            registry.register(_StatsCollector(stats, self.worker, taken))

    def outcome(self, outcome: str, group: str) -> None:
        self.requests.labels(**self.worker, outcome=outcome, task_group=group).inc()

    def rejected(self, status: int, group: str = "other") -> None:
        self.http_rejects.labels(**self.worker, status=str(status)).inc()
        engine = self._engine_requests
        if engine is not None and set(getattr(engine, "_labelnames", ())) == {
                "outcome", names.LABEL_TASK_GROUP}:
            engine.labels(outcome="rejected", task_group=group).inc()
        else:
            self.outcome("rejected", group)

    def timings(self, group: str, latency: float, ttft: float | None, tokens: int) -> None:
        labels = {**self.worker, "task_group": group}
        self.latency.labels(**labels).observe(latency)
        if ttft is not None:
            self.ttft.labels(**labels).observe(ttft)
            if tokens > 1:
                self.tpot.labels(**labels).observe((latency - ttft) / (tokens - 1))

    def reload_error(self) -> None:
        self.reload_errors.labels(**self.worker).inc()


class _StatsCollector(Collector):
    """Gauges read from ``engine.stats()`` at scrape time, for names the engine left out."""

    def __init__(self, stats: Callable[[], Any], worker: dict[str, str], taken: set[str]):
        self.stats = stats
        self.worker = worker
        self.taken = set(taken)

    def collect(self) -> Iterable[GaugeMetricFamily]:
        try:
            s = self.stats()
        except Exception:  # stats are best-effort: a scrape must never fail
            return []
        labels = list(self.worker)
        values = list(self.worker.values())
        out: list[GaugeMetricFamily] = []
        for name, doc, value in (
            (names.QUEUE_DEPTH, "requests waiting for a KV slot", s.queue_depth),
            (names.RUNNING_BATCH_SIZE, "requests holding a KV slot", s.running),
            (names.KV_USAGE, "fraction of KV cache tokens in use", s.kv_usage),
        ):
            if name not in self.taken:
                g = GaugeMetricFamily(name, doc, labels=labels)
                g.add_metric(values, float(value))
                out.append(g)
        if names.POLICY_INFO not in self.taken:
            g = GaugeMetricFamily(names.POLICY_INFO, "the policy this worker runs (value 1)",
                                  labels=[*labels, names.LABEL_POLICY_VERSION,
                                          names.LABEL_POLICY_MODE, names.LABEL_DRAFTER])
            g.add_metric([*values, s.policy_version, s.policy_mode, s.drafter], 1.0)
            out.append(g)
        return out

    def describe(self) -> Iterable[GaugeMetricFamily]:
        return []  # dynamic: names decided at construction, values at scrape
