"""Reading the fleet's live figures from Prometheus (the one I/O edge of the fleet page).

Prometheus down or a query refused is not fatal: the figures it could not read are missing
(shown as "no data") and the error comes back in words for the page's banner.
"""

from __future__ import annotations

import time
from dataclasses import dataclass, field

from specd.dashboard.data import service_queries as sq
from specd.dashboard.data.fleet_queries import (
    SPARKLINE_SPAN_S,
    SPARKLINE_STEP_S,
    Key,
    by_service,
    fleet_queries,
    series_by_service,
    sparkline_query,
)
from specd.operator.analysis.provider import MetricProvider, ProviderError


@dataclass
class Live:
    figures: dict[str, dict[Key, float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)  # one line per figure not read
    queries: int = 0  # sent to Prometheus for this read
    sparklines: dict[Key, list[float]] = field(default_factory=dict)  # tokens/s, 30 min


def read_fleet(provider: MetricProvider | None, window: str = "5m",
               namespace: str | None = None, now: float | None = None) -> Live:
    """The fleet's figures: one instant query per figure and one range query for the
    sparklines, whatever the number of services."""
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
    matrix = getattr(provider, "matrix", None)
    if matrix is not None:
        end = time.time() if now is None else now
        live.queries += 1
        try:
            live.sparklines = series_by_service(matrix(
                sparkline_query(namespace), end - SPARKLINE_SPAN_S, end, SPARKLINE_STEP_S))
        except ProviderError as exc:
            live.errors.append(f"sparkline: {exc}")
    return live


@dataclass
class ServiceLive:
    series: dict[str, sq.Series] = field(default_factory=dict)  # figure -> key -> points
    position_acceptance: dict[tuple[str, ...], float] = field(default_factory=dict)
    verify_length: dict[str, dict[str, float]] = field(default_factory=dict)
    phase_shares: dict[str, dict[str, float]] = field(default_factory=dict)
    errors: list[str] = field(default_factory=list)
    queries: int = 0


SERIES_KEYS = {"ttft_p95": ("track", "task_group"), "tpot_p95": ("track", "task_group")}


def read_service(provider: MetricProvider | None, namespace: str, service: str,
                 frame: sq.Frame, now: float) -> ServiceLive:
    """The service page's figures over ``frame`` ending ``now``; what could not be read is
    missing, with a line in ``errors``."""
    out = ServiceLive()
    if provider is None:
        out.errors.append("no Prometheus configured (--prometheus-url): live figures off")
        return out
    matrix = getattr(provider, "matrix", None)
    for figure, promql in sq.series_queries(namespace, service, frame).items():
        if matrix is None:
            out.errors.append(f"{figure}: this metric provider has no range queries")
            continue
        out.queries += 1
        try:
            out.series[figure] = sq.split(matrix(promql, now - frame.seconds, now, frame.step),
                                          SERIES_KEYS.get(figure, ("track",)))
        except ProviderError as exc:
            out.errors.append(f"{figure}: {exc}")
    snapshots = sq.snapshot_queries(namespace, service, frame)
    readers = {
        "position_acceptance": lambda v: setattr(out, "position_acceptance",
                                                 sq.keyed(v, ("track", "position"))),
        "verify_length": lambda v: setattr(out, "verify_length",
                                           sq.verify_length_counts(sq.keyed(v, ("track", "le")))),
        "phase_seconds": lambda v: setattr(out, "phase_shares",
                                           sq.phase_shares(sq.keyed(v, ("track", "phase")))),
    }
    for figure, promql in snapshots.items():
        out.queries += 1
        try:
            readers[figure](provider.vector(promql))
        except ProviderError as exc:
            out.errors.append(f"{figure}: {exc}")
    return out
