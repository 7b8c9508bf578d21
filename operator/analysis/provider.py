"""Where analysis values come from: the provider interface and the Prometheus provider.

A provider answers one PromQL expression with one number (or None when there is no series)
or a labelled vector. Anything that keeps it from answering -- the server unreachable, a
query it refuses, a result of the wrong shape -- is a :class:`ProviderError` carrying the
server's own message; the analysis records it as an Error, never as a value.
"""

from __future__ import annotations

from datetime import UTC, datetime
from typing import Any, Protocol


class ProviderError(Exception):
    """The provider could not answer (its message says why, in the server's words)."""


class MetricProvider(Protocol):
    def value(self, promql: str) -> float | None: ...

    def vector(self, promql: str) -> list[tuple[dict[str, str], float]]: ...


class PrometheusProvider:
    """Instant queries through prometheus-api-client."""

    def __init__(self, url: str, timeout_s: float = 10.0) -> None:
        from prometheus_api_client import PrometheusConnect

        self.url = url
        self.client = PrometheusConnect(url=url, disable_ssl=True)
        self.timeout_s = timeout_s

    def _query(self, promql: str, over: tuple[float, float, float] | None = None
               ) -> list[dict[str, Any]]:
        import requests
        from prometheus_api_client import PrometheusApiClientException

        try:
            if over is None:
                return list(self.client.custom_query(promql, timeout=self.timeout_s))
            start, end, step = over
            return list(self.client.custom_query_range(
                promql, datetime.fromtimestamp(start, UTC), datetime.fromtimestamp(end, UTC),
                f"{step:g}s", timeout=self.timeout_s))
        except PrometheusApiClientException as exc:
            raise ProviderError(f"Prometheus refused the query: {exc}") from exc
        except requests.RequestException as exc:
            raise ProviderError(f"Prometheus at {self.url} unreachable: "
                                f"{type(exc).__name__}: {exc}") from exc

    def vector(self, promql: str) -> list[tuple[dict[str, str], float]]:
        return [(dict(item.get("metric", {})), float(item["value"][1]))
                for item in self._query(promql)]

    def matrix(self, promql: str, start: float, end: float, step: float
               ) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        """A range query: each series' labels and its (epoch seconds, value) points."""
        return [(dict(item.get("metric", {})),
                 [(float(t), float(v)) for t, v in item.get("values", [])])
                for item in self._query(promql, (start, end, step))]

    def value(self, promql: str) -> float | None:
        series = self.vector(promql)
        if not series:
            return None
        if len(series) > 1:
            raise ProviderError(f"the query returned {len(series)} series, not one: {promql}")
        return series[0][1]
