"""Judging one metric of one analysis run (pure).

A value is read only when there is something to read: no series, NaN or infinity, a zero
denominator (a relativeToStable comparison against a stable value of 0), or fewer requests
in the window than ``minSamples`` on a track being compared is Inconclusive -- never a pass,
never a failure. Otherwise the value (absolute) or the canary / stable ratio
(relativeToStable) must lie within [min, max].
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from specd.operator.rollout.canary import Measurement, Verdict

Comparison = Literal["absolute", "relativeToStable"]


@dataclass(frozen=True)
class Result:
    """One metric (and task group) of one run: what the status and the history keep."""

    name: str
    metric: str
    task_group: str | None
    verdict: Verdict
    message: str
    canary: float | None = None
    stable: float | None = None
    value: float | None = None  # what was compared: canary, or canary / stable
    query: str = ""


def _finite(value: float | None) -> bool:
    return value is not None and math.isfinite(value)


def _fmt(value: float | None) -> str:
    return "none" if value is None else f"{value:.4g}"


def judge(*, name: str, metric: str, comparison: Comparison, minimum: float | None,
          maximum: float | None, canary: float | None, stable: float | None,
          canary_samples: float | None, stable_samples: float | None, min_samples: int,
          task_group: str | None = None, query: str = "") -> Result:
    where = f"{name}" + (f"[{task_group}]" if task_group else "")

    def result(verdict: Verdict, message: str, value: float | None = None) -> Result:
        return Result(name, metric, task_group, verdict, f"{where}: {message}", canary, stable,
                      value, query)

    relative = comparison == "relativeToStable"
    counts = [("canary", canary_samples)] + ([("stable", stable_samples)] if relative else [])
    for track, count in counts:
        if not _finite(count) or count < min_samples:  # type: ignore[operator]
            return result("Inconclusive", f"too few requests on the {track} track "
                                          f"({_fmt(count)} < minSamples {min_samples})")
    if not _finite(canary):
        return result("Inconclusive", f"no data for the canary ({_fmt(canary)})")
    if relative:
        if not _finite(stable):
            return result("Inconclusive", f"no data for the stable track ({_fmt(stable)})")
        if stable == 0:
            return result("Inconclusive", "the stable value is 0 (no ratio)")
        value = canary / stable  # type: ignore[operator]
        shown = f"canary {_fmt(canary)} / stable {_fmt(stable)} = {value:.3f}"
    else:
        value = canary  # type: ignore[assignment]
        shown = f"canary {_fmt(canary)}"
    if minimum is not None and value < minimum:
        return result("Failed", f"{shown} < min {minimum:g}", value)
    if maximum is not None and value > maximum:
        return result("Failed", f"{shown} > max {maximum:g}", value)
    return result("Successful", f"{shown} within bounds", value)


def combine(results: Sequence[Result]) -> Measurement:
    """One run's verdict: any Failed fails it (measured evidence); else any Error makes it an
    Error; else any Inconclusive makes it Inconclusive; else Successful."""
    if not results:
        return Measurement("Inconclusive", "no metric was measured")
    for verdict in ("Failed", "Error", "Inconclusive"):
        hits = [r for r in results if r.verdict == verdict]
        if hits:
            more = f" (+{len(hits) - 1} more)" if len(hits) > 1 else ""
            return Measurement(verdict, hits[0].message + more)  # type: ignore[arg-type]
    return Measurement("Successful", f"{len(results)} checks passed")
