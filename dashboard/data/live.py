"""Reading the fleet's live figures from Prometheus (the one I/O edge of the fleet page).

Prometheus down or a query refused is not fatal: the figures it could not read are missing
(shown as "no data") and the error comes back in words for the page's banner.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specd.dashboard.data.fleet_queries import Key, by_service, fleet_queries
from specd.operator.analysis.provider import MetricProvider, ProviderError


@dataclass
class Live:
    figures: dict[str, dict[Key, float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # one line per figure not read
    queries: int = 0  # sent to Prometheus for this read


def read_fleet(provider: MetricProvider | None, window: str = "5m",
               namespace: str | None = None) -> Live:
    live = Live()
    if provider is None:
        live.errors.append("no Prometheus configured (--prometheus-url): live figures off")
        return live
    for figure, promql in fleet_queries(window, namespace).items():
        live.queries += 1
        try:
            live.figures[figure] = by_service(provider.vector(promql))
        except ProviderError as exc:
            live.errors.append(f"{figure}: {exc}")
    return live
