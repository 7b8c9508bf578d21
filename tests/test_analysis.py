"""Canary analysis without a cluster: the judge (no data is never good or bad), how a run's
results combine, the PromQL each built-in metric becomes, and a run over recorded values."""

from __future__ import annotations

import math

import pytest

from specd.api.spec import AnalysisSpec
from specd.operator.analysis import promql
from specd.operator.analysis.judge import Result, combine, judge
from specd.operator.analysis.provider import ProviderError
from specd.operator.analysis.run import run, window


def j(**kw) -> Result:
    base = dict(name="tps", metric="tokensPerSecond", comparison="relativeToStable",
                minimum=0.95, maximum=None, canary=20.0, stable=20.0, canary_samples=50,
                stable_samples=50, min_samples=20)
    base.update(kw)
    return judge(**base)


@pytest.mark.parametrize("change, verdict, words", [
    ({}, "Successful", "canary 20 / stable 20 = 1.000 within bounds"),
    ({"canary": 15.0}, "Failed", "= 0.750 < min 0.95"),
    ({"canary": None}, "Inconclusive", "no data for the canary"),
    ({"canary": math.nan}, "Inconclusive", "no data for the canary"),
    ({"stable": None}, "Inconclusive", "no data for the stable track"),
    ({"stable": 0.0}, "Inconclusive", "stable value is 0"),
    ({"canary_samples": 3}, "Inconclusive", "too few requests on the canary track (3 < minSamples 20)"),
    ({"stable_samples": None}, "Inconclusive", "too few requests on the stable track"),
    ({"comparison": "absolute", "minimum": None, "maximum": 0.01, "canary": 0.02,
      "stable": None, "stable_samples": None}, "Failed", "canary 0.02 > max 0.01"),
    ({"comparison": "absolute", "minimum": None, "maximum": 0.01, "canary": 0.0,
      "stable": None, "stable_samples": None}, "Successful", "within bounds"),
    ({"task_group": "code", "canary": 10.0}, "Failed", "tps[code]: canary 10 / stable 20"),
])
def test_the_judge(change: dict, verdict: str, words: str) -> None:
    result = j(**change)
    assert result.verdict == verdict and words in result.message, result.message


def test_a_run_combines_with_failure_first_then_error_then_inconclusive() -> None:
    ok, bad = j(), j(canary=1.0)
    error = Result("q", "custom", None, "Error", "q: Prometheus refused the query")
    unsure = j(canary=None)
    assert combine([ok, ok]).verdict == "Successful"
    assert combine([ok, unsure]).verdict == "Inconclusive"
    assert combine([unsure, error]).verdict == "Error"
    failed = combine([error, bad, unsure, j(canary=2.0)])
    assert failed.verdict == "Failed" and "(+1 more)" in failed.message
    assert combine([]).verdict == "Inconclusive"


def test_promql_for_each_metric_selects_one_services_track() -> None:
    scope = promql.Scope("ns", "svc", "canary", "60s", "code")
    sel = '{namespace="ns", serving_specd_io_service="svc", track="canary", task_group="code"}'
    assert promql.query("tokensPerSecond", scope) == (
        f"(sum(rate(specd_time_per_output_token_seconds_count{sel}[60s]))) / "
        f"(sum(rate(specd_time_per_output_token_seconds_sum{sel}[60s])))")
    assert promql.query("latencyP95", scope) == (
        f"histogram_quantile(0.95, sum by (le) (rate(specd_request_latency_seconds_bucket"
        f"{sel}[60s])))")
    assert 'outcome=~"error|rejected"' in promql.query("errorRate", scope)
    assert 'status="429"' in promql.query("rejectionRate", scope)
    assert promql.query("custom", scope, 'up{track="{{track}}", ns="{{namespace}}"}') == \
        'up{track="canary", ns="ns"}'
    for metric in ("acceptanceLength", "truncationRatio", "timeToFirstTokenP95",
                   "timePerOutputTokenP95", "kvCacheUsage"):
        assert sel in promql.query(metric, scope)
    with pytest.raises(ValueError):
        promql.query("vibes", scope)
    assert promql.samples(scope) == f"sum(increase(specd_requests_total{sel}[60s]))"


class Recorded:
    """Values recorded from a Prometheus, answered by query text (a test double of the
    provider interface for the pure run logic; the real provider has its own test)."""

    def __init__(self, values: dict[tuple[str, str | None], float | None],
                 groups: list[str], fail: str | None = None) -> None:
        self.values, self.groups, self.fail = values, groups, fail
        self.asked: list[str] = []

    def value(self, query: str) -> float | None:
        self.asked.append(query)
        if self.fail and self.fail in query:
            raise ProviderError("Prometheus refused the query: bad_data")
        track = "canary" if 'track="canary"' in query else "stable"
        group = next((g for g in self.groups if f'task_group="{g}"' in query), None)
        if "increase(" in query:
            return 100.0
        return self.values.get((track, group))

    def vector(self, query: str) -> list[tuple[dict[str, str], float]]:
        return [({"task_group": g}, 1.0) for g in self.groups]


def test_a_run_judges_every_task_group_on_its_own() -> None:
    analysis = AnalysisSpec.model_validate({"interval": "10s", "metrics": [
        {"name": "tps", "metric": "tokensPerSecond", "min": 0.95, "byTaskGroup": True}]})
    values = {("canary", "chat"): 30.0, ("stable", "chat"): 20.0,  # faster on chat
              ("canary", "code"): 15.0, ("stable", "code"): 20.0}  # slower on code
    measurement, results = run(analysis, Recorded(values, ["chat", "code"]), "ns", "svc")
    assert [r.verdict for r in results] == ["Successful", "Failed"]
    assert measurement.verdict == "Failed" and "tps[code]" in measurement.message
    # the average (22.5 vs 20) would have hidden it
    assert window(analysis) == "30s"


def test_a_run_with_no_traffic_or_a_refused_query_is_never_a_pass() -> None:
    analysis = AnalysisSpec.model_validate({"metrics": [
        {"name": "tps", "metric": "tokensPerSecond", "min": 0.95, "byTaskGroup": True},
        {"name": "q", "metric": "custom", "query": "bad(", "comparison": "absolute",
         "max": 1}]})
    measurement, results = run(analysis, Recorded({}, []), "ns", "svc")
    assert [r.verdict for r in results] == ["Inconclusive", "Inconclusive"]
    assert measurement.verdict == "Inconclusive"
    measurement, results = run(analysis, Recorded({}, [], fail="bad("), "ns", "svc")
    assert results[1].verdict == "Error" and "bad_data" in results[1].message
    assert measurement.verdict == "Error"


def test_the_probes_join_the_run_and_a_failed_probe_fails_it() -> None:
    analysis = AnalysisSpec.model_validate({"metrics": [
        {"name": "tps", "metric": "tokensPerSecond", "min": 0.9}], "probes": {}})
    assert analysis.probes is not None and len(analysis.probes.prompts) == 4
    values = {("canary", None): 20.0, ("stable", None): 20.0}
    passed = Result("lossless", "losslessProbe", None, "Successful", "lossless: 4 probes")
    failed = Result("lossless", "losslessProbe", None, "Failed", "lossless: probe 2 differs")
    measurement, results = run(analysis, Recorded(values, []), "ns", "svc", lambda: passed)
    assert [r.metric for r in results] == ["losslessProbe", "tokensPerSecond"]
    assert measurement.verdict == "Successful"
    measurement, _ = run(analysis, Recorded(values, []), "ns", "svc", lambda: failed)
    assert measurement.verdict == "Failed" and "probe 2" in measurement.message


def test_without_prometheus_metrics_are_errors_but_probes_still_run() -> None:
    analysis = AnalysisSpec.model_validate({"metrics": [
        {"name": "tps", "metric": "tokensPerSecond", "min": 0.9}], "probes": {}})
    probe = Result("lossless", "losslessProbe", None, "Successful", "lossless: ok")
    measurement, results = run(analysis, None, "ns", "svc", lambda: probe)
    assert [r.verdict for r in results] == ["Successful", "Error"]
    assert measurement.verdict == "Error" and "--prometheus-url" in measurement.message
    only_probes = AnalysisSpec.model_validate({"probes": {"prompts": ["hi"]}})
    measurement, results = run(only_probes, None, "ns", "svc", lambda: probe)
    assert measurement.verdict == "Successful" and len(results) == 1
