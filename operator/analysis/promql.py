"""PromQL for canary analysis, built in one place from ``specd.api.metrics``.

Series carry ``namespace``, ``track`` and the pod's labels (``serving_specd_io_service``) as
discovery gives them (``docs/prometheus.md``), so one selector picks one service's track.

Built-in metrics (higher is better unless said):

- acceptanceLength: tau, committed tokens per request per round;
- truncationRatio: truncated / drafted (lower is better);
- tokensPerSecond: a request's decode speed, output tokens per second after the first
  (1 / mean time per output token): what a user of the service feels, by task group;
- latencyP95, timeToFirstTokenP95, timePerOutputTokenP95: seconds (lower is better);
- errorRate: requests that errored or were refused / all requests (lower is better);
- kvCacheUsage: the highest KV-cache usage ratio over the window (memory pressure);
- rejectionRate: requests refused with 429 (queue full) / all requests;
- custom: the user's PromQL with ``{{namespace}}``, ``{{service}}``, ``{{track}}`` filled in.
"""

from __future__ import annotations

from dataclasses import dataclass

from specd.api import metrics as m

SERVICE_LABEL = "serving_specd_io_service"


@dataclass(frozen=True)
class Scope:
    namespace: str
    service: str
    track: str
    window: str  # a PromQL range, e.g. "1m"
    task_group: str | None = None

    def selector(self, extra: str = "") -> str:
        parts = [f'namespace="{self.namespace}"', f'{SERVICE_LABEL}="{self.service}"',
                 f'track="{self.track}"']
        if self.task_group is not None:
            parts.append(f'{m.LABEL_TASK_GROUP}="{self.task_group}"')
        if extra:
            parts.append(extra)
        return "{" + ", ".join(parts) + "}"


def _rate(name: str, scope: Scope, extra: str = "") -> str:
    return f"sum(rate({name}{scope.selector(extra)}[{scope.window}]))"


def _ratio(numerator: str, denominator: str) -> str:
    return f"({numerator}) / ({denominator})"


def _quantile(q: float, histogram: str, scope: Scope) -> str:
    return (f"histogram_quantile({q}, sum by (le) (rate({histogram}_bucket"
            f"{scope.selector()}[{scope.window}])))")


def query(metric: str, scope: Scope, custom: str | None = None) -> str:
    """The PromQL giving one number for ``metric`` over ``scope``."""
    if metric == "acceptanceLength":
        return _ratio(_rate(f"{m.ACCEPTANCE_LENGTH}_sum", scope),
                      _rate(f"{m.ACCEPTANCE_LENGTH}_count", scope))
    if metric == "truncationRatio":
        return _ratio(_rate(f"{m.TRUNCATED_TOKENS}_total", scope),
                      _rate(f"{m.DRAFTED_TOKENS}_total", scope))
    if metric == "tokensPerSecond":
        return _ratio(_rate(f"{m.TIME_PER_OUTPUT_TOKEN_SECONDS}_count", scope),
                      _rate(f"{m.TIME_PER_OUTPUT_TOKEN_SECONDS}_sum", scope))
    if metric == "latencyP95":
        return _quantile(0.95, m.REQUEST_LATENCY_SECONDS, scope)
    if metric == "timeToFirstTokenP95":
        return _quantile(0.95, m.TIME_TO_FIRST_TOKEN_SECONDS, scope)
    if metric == "timePerOutputTokenP95":
        return _quantile(0.95, m.TIME_PER_OUTPUT_TOKEN_SECONDS, scope)
    # a counter that never moved has no series: with requests in the window that is a rate
    # of 0, not "no data" (without requests the denominator is empty: Inconclusive)
    if metric == "errorRate":
        return _ratio(_rate(f"{m.REQUESTS}_total", scope, 'outcome=~"error|rejected"')
                      + " or vector(0)", _rate(f"{m.REQUESTS}_total", scope))
    if metric == "rejectionRate":
        return _ratio(_rate("specd_http_rejections_total", scope, 'status="429"')
                      + " or vector(0)", _rate(f"{m.REQUESTS}_total", scope))
    if metric == "kvCacheUsage":
        return f"max(max_over_time({m.KV_USAGE}{scope.selector()}[{scope.window}]))"
    if metric == "custom":
        if not custom:
            raise ValueError("a custom metric needs its query")
        return (custom.replace("{{namespace}}", scope.namespace)
                .replace("{{service}}", scope.service).replace("{{track}}", scope.track))
    raise ValueError(f"unknown metric {metric!r}")


def samples(scope: Scope) -> str:
    """Requests the track finished in the window: below the minimum, a value is not read."""
    return f"sum(increase({m.REQUESTS}_total{scope.selector()}[{scope.window}]))"


def task_groups(namespace: str, service: str, window: str) -> str:
    """The task groups either track served in the window."""
    selector = f'{{namespace="{namespace}", {SERVICE_LABEL}="{service}"}}'
    return (f"sum by ({m.LABEL_TASK_GROUP}) "
            f"(increase({m.REQUESTS}_total{selector}[{window}])) > 0")


LOWER_IS_BETTER = {"truncationRatio", "latencyP95", "timeToFirstTokenP95",
                   "timePerOutputTokenP95", "errorRate", "rejectionRate", "kvCacheUsage"}
# built-ins whose series have no task_group label (round- or pod-level)
NOT_BY_GROUP = {"kvCacheUsage"}
