"""One analysis run: every configured metric, per task group where asked, canary against
stable over the same window, and the lossless probes -> one Measurement for the state
machine and the per-metric results for the status and the history."""

from __future__ import annotations

from collections.abc import Callable

from specd.api.spec import AnalysisMetric, AnalysisSpec
from specd.operator.analysis import promql
from specd.operator.analysis.judge import Result, combine, judge
from specd.operator.analysis.provider import MetricProvider, ProviderError
from specd.operator.rollout.canary import Measurement, parse_duration


def window(analysis: AnalysisSpec) -> str:
    """The range each query reads: the analysis interval, at least 30 s (a rate over fewer
    scrapes is noise)."""
    seconds = max(30.0, parse_duration(analysis.interval))
    return f"{int(seconds)}s"


def run(analysis: AnalysisSpec, provider: MetricProvider | None, namespace: str,
        service: str, probes: Callable[[], Result] | None = None
        ) -> tuple[Measurement, list[Result]]:
    """Every metric (per task group where asked) and, with ``probes``, the lossless probes.
    Without a provider (no ``--prometheus-url``) each metric is an Error, never a pass."""
    span = window(analysis)
    results: list[Result] = [probes()] if probes is not None else []
    if provider is None:
        results += [Result(m.name, m.metric, None, "Error",
                           f"{m.name}: no Prometheus to analyse with "
                           "(specd operator --prometheus-url)") for m in analysis.metrics]
        return combine(results), results
    groups: list[str] | None = None

    def task_groups() -> list[str]:
        nonlocal groups
        if groups is None:
            groups = sorted(labels.get("task_group", "other") for labels, _ in
                            provider.vector(promql.task_groups(namespace, service, span)))
        return groups

    for metric in analysis.metrics:
        try:
            scopes: list[str | None] = [None]
            if metric.by_task_group and metric.metric not in promql.NOT_BY_GROUP:
                scopes = list(task_groups())
                if not scopes:
                    results.append(Result(metric.name, metric.metric, None, "Inconclusive",
                                          f"{metric.name}: no task group had traffic in {span}"))
                    continue
            for group in scopes:
                results.append(_one(metric, provider, namespace, service, span, group,
                                    analysis.min_samples))
        except ProviderError as exc:
            results.append(Result(metric.name, metric.metric, None, "Error",
                                  f"{metric.name}: {exc}"))
    return combine(results), results


def _one(metric: AnalysisMetric, provider: MetricProvider, namespace: str, service: str,
         span: str, group: str | None, min_samples: int) -> Result:
    def scope(track: str) -> promql.Scope:
        return promql.Scope(namespace, service, track, span, group)

    relative = metric.comparison == "relativeToStable"
    canary_query = promql.query(metric.metric, scope("canary"), metric.query)
    value: Callable[[str], float | None] = provider.value
    try:
        canary = value(canary_query)
        canary_n = value(promql.samples(scope("canary")))
        stable = value(promql.query(metric.metric, scope("stable"), metric.query)) \
            if relative else None
        stable_n = value(promql.samples(scope("stable"))) if relative else None
    except ProviderError as exc:
        where = metric.name + (f"[{group}]" if group else "")
        return Result(metric.name, metric.metric, group, "Error", f"{where}: {exc}",
                      query=canary_query)
    return judge(name=metric.name, metric=metric.metric, comparison=metric.comparison,
                 minimum=metric.min, maximum=metric.max, canary=canary, stable=stable,
                 canary_samples=canary_n, stable_samples=stable_n, min_samples=min_samples,
                 task_group=group, query=canary_query)
