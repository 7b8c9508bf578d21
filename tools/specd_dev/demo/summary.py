"""The demo's figures per scheme, read from Prometheus with the dashboard's fleet queries
(``specd.dashboard.data.fleet_queries``: the same numbers the fleet page shows)."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specd.dashboard.data.fleet_queries import by_service, fleet_queries
from specd.operator.analysis.provider import MetricProvider

COLUMNS = (("tau", "τ", 2, 1.0, ""), ("acceptance", "acceptance", 0, 100.0, " %"),
           ("tokens_per_s", "tokens/s", 1, 1.0, ""), ("tpot_p95", "p95 TPOT", 0, 1000.0, " ms"))


@dataclass(frozen=True)
class Figures:
    window: str
    values: Mapping[str, float | None]  # fleet figure -> value; None: no data

    def cell(self, figure: str) -> str:
        for name, _, digits, scale, unit in COLUMNS:
            if name == figure:
                value = self.values.get(figure)
                return "no data" if value is None else f"{value * scale:.{digits}f}{unit}"
        raise KeyError(figure)

    def line(self) -> str:
        return ", ".join(f"{label} {self.cell(name)}" for name, label, *_ in COLUMNS) + \
            f" (last {self.window})"


def measure(provider: MetricProvider, namespace: str, service: str, window: str) -> Figures:
    key = (namespace, service)
    return Figures(window, {figure: by_service(provider.vector(promql)).get(key)
                            for figure, promql in fleet_queries(window, namespace).items()})


def table(figures: Mapping[str, Figures]) -> list[str]:
    """A Markdown table: one row per scheme."""
    head = "| scheme | " + " | ".join(label for _, label, *_ in COLUMNS) + " |"
    rows = [head, "|" + "---|" * (len(COLUMNS) + 1)]
    for scheme, fig in figures.items():
        rows.append(f"| {scheme} | " + " | ".join(fig.cell(n) for n, *_ in COLUMNS) + " |")
    return rows
