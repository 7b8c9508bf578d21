"""The dashboard's fleet data (pure): rows from SpeculativeService objects and live figures,
what needs attention and why, the URL filters, and PromQL whose count does not grow with
the fleet."""

from __future__ import annotations

import copy
import math
from pathlib import Path

import yaml

from specd.dashboard.data import fleet as f
from specd.dashboard.data.fleet_queries import FLEET_FIGURES, by_service, fleet_queries
from specd.operator.analysis.promql import SERVICE_LABEL

ROOT = Path(__file__).resolve().parents[1]


def sample(name: str, example: str = "scheme-b", namespace: str = "team-a", **status) -> dict:
    obj = yaml.safe_load((ROOT / "examples" / f"speculativeservice-{example}.yaml").read_text())
    obj["metadata"] = {"name": name, "namespace": namespace}
    obj["status"] = {"phase": "Ready", "ready": "1/1", "stableRevision": "abc123", **status}
    return obj


def canary(name: str, rollout: dict, **status) -> dict:
    obj = sample(name, **status)
    obj["spec"]["rollout"] = {"strategy": "Canary",
                              "steps": [{"weight": 25}, {"weight": 50, "pause": {}}]}
    obj["status"].update(canaryRevision="def456", canaryWeight=50, rollout=rollout)
    return obj


def test_a_steady_service_needs_nothing() -> None:
    row = f.fleet_row(sample("svc"))
    assert (row.phase, row.mode, row.k, row.step, row.set_weight) == (
        "Ready", "scheduled", 6, "-", None)
    assert row.attention == () and row.tuner == "on"  # the sample tunes
    assert f.fleet_row(sample("a", example="scheme-a")).tuner == "off"
    assert row.figures == dict.fromkeys(FLEET_FIGURES)  # no data, not zeros
    plain = f.fleet_row(sample("p", example="plain"))
    assert (plain.mode, plain.k) == ("plain", None)


def test_a_canary_at_its_step_pause_is_not_attention_but_other_pauses_are() -> None:
    at_step = f.fleet_row(canary("c", {"phase": "Paused", "pauseReason": "StepPause",
                                       "step": 1, "setWeight": 50}))
    assert (at_step.step, at_step.set_weight, at_step.actual_weight) == ("2/2", 50, 50)
    assert at_step.attention == ()
    for reason in ("UserPaused", "Inconclusive", "ProgressDeadlineExceeded"):
        row = f.fleet_row(canary("c", {"phase": "Paused", "pauseReason": reason}))
        assert row.attention == (f"paused: {reason}",)


def test_rollbacks_degraded_analysis_and_tuner_fallbacks_say_why() -> None:
    rolled = f.fleet_row(canary("r", {"phase": "RolledBack",
                                      "message": "tokensPerSecond failed (code)"}))
    assert rolled.attention == ("rolled back: tokensPerSecond failed (code)",)
    degraded = sample("d", phase="Degraded", conditions=[
        {"type": "Degraded", "status": "True", "reason": "ApplyFailed",
         "message": "deployments.apps is forbidden"}])
    assert f.attention(degraded) == ["Degraded: deployments.apps is forbidden"]
    analysed = sample("a", analysis=[
        {"name": "tps", "metric": "tokensPerSecond", "taskGroup": "chat",
         "verdict": "Inconclusive"},
        {"name": "trunc", "metric": "truncationRatio", "taskGroup": None,
         "verdict": "Successful"}])
    assert f.attention(analysed) == ["analysis inconclusive: tps (chat)"]
    tuned = sample("t", tuning={"overlay": {"code": {"mode": "plain"},
                                            "chat": {"calibration": {"bias": [0.5]}}}})
    tuned["spec"]["tuning"] = {"enabled": True}
    row = f.fleet_row(tuned)
    assert row.tuner == "on; plain: code"
    assert row.attention == ("tuner fallback to plain: code",)


def test_live_figures_join_by_namespace_and_name() -> None:
    objects = [sample("b"), sample("a"), sample("a", namespace="team-b")]
    live = {"tau": {("team-a", "a"): 2.4, ("team-b", "a"): 1.1},
            "tokens_per_s": {("team-a", "b"): 30.0}}
    rows = f.fleet(objects, live)
    assert [r.key for r in rows] == [("team-a", "a"), ("team-a", "b"), ("team-b", "a")]
    assert rows[0].figures["tau"] == 2.4 and rows[0].figures["tokens_per_s"] is None
    assert rows[1].figures["tokens_per_s"] == 30.0 and rows[1].figures["tau"] is None
    assert rows[2].figures["tau"] == 1.1


def test_filters() -> None:
    rows = f.fleet([sample("quiet"), canary("noisy", {"phase": "Paused",
                                                      "pauseReason": "UserPaused"}),
                    sample("other", namespace="team-b")], {})
    assert [r.name for r in f.select(rows, attention_only=True)] == ["noisy"]
    assert [r.name for r in f.select(rows, namespace="team-b")] == ["other"]
    assert [r.name for r in f.select(rows, text="QUI")] == ["quiet"]
    assert len(f.select(rows)) == 3


def test_one_query_per_figure_whatever_the_fleet() -> None:
    queries = fleet_queries("5m")
    assert set(queries) == set(FLEET_FIGURES)
    for promql in queries.values():
        assert f"by (namespace, {SERVICE_LABEL}" in promql and "[5m]" in promql
        assert 'track="' not in promql  # both tracks: the service as its users see it
    scoped = fleet_queries("1h", namespace="team-a")
    assert all('{namespace="team-a"}' in q and "[1h]" in q for q in scoped.values())


def test_empty_denominators_are_no_data() -> None:
    vector = [({"namespace": "a", SERVICE_LABEL: "x"}, 2.0),
              ({"namespace": "a", SERVICE_LABEL: "y"}, math.nan),
              ({"namespace": "a", SERVICE_LABEL: "z"}, math.inf),
              ({"namespace": "a"}, 1.0)]
    assert by_service(vector) == {("a", "x"): 2.0}


def test_rows_do_not_change_the_objects() -> None:
    obj = canary("c", {"phase": "Paused", "pauseReason": "UserPaused"})
    before = copy.deepcopy(obj)
    f.fleet([obj], {})
    assert obj == before


class Answers:
    """A MetricProvider answering from a table (or refusing one query), counting calls."""

    def __init__(self, refuse: str | None = None) -> None:
        self.refuse, self.calls = refuse, 0

    def vector(self, promql: str) -> list[tuple[dict[str, str], float]]:
        from specd.operator.analysis.provider import ProviderError

        self.calls += 1
        if self.refuse and self.refuse in promql:
            raise ProviderError("Prometheus at http://p:9090 unreachable: ConnectionError")
        return [({"namespace": "a", SERVICE_LABEL: "x"}, float(self.calls))]

    def value(self, promql: str) -> float | None:
        raise AssertionError("the fleet reads vectors only")

    def matrix(self, promql: str, start: float, end: float, step: float
               ) -> list[tuple[dict[str, str], list[tuple[float, float]]]]:
        self.calls += 1
        self.span = (start, end, step)
        # out of order and with a gap (NaN): the line keeps time order and skips the gap
        return [({"namespace": "a", SERVICE_LABEL: "x"},
                 [(end, 3.0), (end - 120, 1.0), (end - 60, float("nan"))]),
                ({"namespace": "a", SERVICE_LABEL: "empty"}, [(end, float("nan"))])]


def test_reading_the_fleet_costs_one_query_per_figure_and_survives_errors() -> None:
    from specd.dashboard.data.live import read_fleet

    provider = Answers(refuse="specd_truncated_tokens")
    live = read_fleet(provider, "5m", now=10_000.0)
    # one instant query per figure and one range query for the sparklines, for any fleet
    assert live.queries == provider.calls == len(FLEET_FIGURES) + 1
    assert set(live.figures) == set(FLEET_FIGURES) - {"truncation"}
    assert live.errors == ["truncation: Prometheus at http://p:9090 unreachable: ConnectionError"]
    rows = f.fleet([sample("x", namespace="a")], live.figures)
    assert rows[0].figures["truncation"] is None and rows[0].figures["tau"] is not None
    assert read_fleet(None).errors and read_fleet(None).queries == 0
    assert provider.span == (10_000.0 - 1800, 10_000.0, 60)
    assert live.sparklines == {("a", "x"): [1.0, 3.0]}  # no service "empty": no line


def test_the_sparkline_column_is_empty_without_data_never_zeros() -> None:
    from specd.dashboard.views.fleet import SPARKLINE, table

    rows = f.fleet([sample("x", namespace="a"), sample("y", namespace="a")], {})
    shown = table(rows, {("a", "x"): [1.0, 2.5]})
    assert [r[SPARKLINE] for r in shown] == [[1.0, 2.5], []]
