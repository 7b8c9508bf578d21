"""PromQL for the fleet page: one query per figure for every service at once.

Each is summed ``by (namespace, serving_specd_io_service)`` over both tracks, so a refresh
costs ``len(FLEET_FIGURES)`` queries whatever the number of services (the per-service
recipes of canary analysis, ``specd.operator.analysis.promql``, would cost one per service
and figure). Ratios whose denominator is empty come back as NaN or not at all: "no data",
never 0.

- tau:          sum by (ns, svc) (rate(specd_acceptance_length_sum[W])) / ..._count
- acceptance:   accepted / verified tokens
- truncation:   truncated / drafted tokens
- tokens_per_s: rate of emitted tokens (the service's throughput)
- tpot_p95:     histogram_quantile(0.95, sum by (ns, svc, le) (rate(..._bucket[W])))

and one range query for the sparkline: tokens/s (rate over 1m) over the last
``SPARKLINE_SPAN_S`` at ``SPARKLINE_STEP_S`` steps, for every service at once.
"""

from __future__ import annotations

import math
from collections.abc import Iterable

from specd.api import metrics as m
from specd.operator.analysis.promql import SERVICE_LABEL

BY = f"namespace, {SERVICE_LABEL}"
FLEET_FIGURES = ("tau", "acceptance", "truncation", "tokens_per_s", "tpot_p95")
Key = tuple[str, str]  # (namespace, service)
SPARKLINE_SPAN_S, SPARKLINE_STEP_S = 30 * 60, 60


def _selector(namespace: str | None) -> str:
    return f'{{namespace="{namespace}"}}' if namespace else ""


def _rate(name: str, window: str, namespace: str | None) -> str:
    return f"sum by ({BY}) (rate({name}{_selector(namespace)}[{window}]))"


def fleet_queries(window: str = "5m", namespace: str | None = None) -> dict[str, str]:
    """Figure -> PromQL over every service (in ``namespace``, or all)."""
    def ratio(top: str, bottom: str) -> str:
        return f"{_rate(top, window, namespace)} / {_rate(bottom, window, namespace)}"

    tpot = m.TIME_PER_OUTPUT_TOKEN_SECONDS
    return {
        "tau": ratio(f"{m.ACCEPTANCE_LENGTH}_sum", f"{m.ACCEPTANCE_LENGTH}_count"),
        "acceptance": ratio(f"{m.ACCEPTED_TOKENS}_total", f"{m.VERIFIED_TOKENS}_total"),
        "truncation": ratio(f"{m.TRUNCATED_TOKENS}_total", f"{m.DRAFTED_TOKENS}_total"),
        "tokens_per_s": _rate(f"{m.EMITTED_TOKENS}_total", window, namespace),
        "tpot_p95": (f"histogram_quantile(0.95, sum by ({BY}, le) "
                     f"(rate({tpot}_bucket{_selector(namespace)}[{window}])))"),
    }


def sparkline_query(namespace: str | None = None) -> str:
    """Tokens/s of every service, to be read as a range (``SPARKLINE_SPAN_S``)."""
    return _rate(f"{m.EMITTED_TOKENS}_total", "1m", namespace)


def series_by_service(matrix: Iterable[tuple[dict[str, str], list[tuple[float, float]]]]
                      ) -> dict[Key, list[float]]:
    """A range result keyed by (namespace, service): the finite values in time order (a
    gap in the data is left out of the line, not drawn as 0)."""
    out: dict[Key, list[float]] = {}
    for labels, points in matrix:
        if "namespace" in labels and SERVICE_LABEL in labels:
            values = [v for _, v in sorted(points) if math.isfinite(v)]
            if values:
                out[(labels["namespace"], labels[SERVICE_LABEL])] = values
    return out


def by_service(vector: Iterable[tuple[dict[str, str], float]]) -> dict[Key, float]:
    """A vector result keyed by (namespace, service); NaN and infinities (an empty
    denominator) are left out, so a missing key reads as "no data"."""
    out: dict[Key, float] = {}
    for labels, value in vector:
        if math.isfinite(value) and "namespace" in labels and SERVICE_LABEL in labels:
            out[(labels["namespace"], labels[SERVICE_LABEL])] = value
    return out
