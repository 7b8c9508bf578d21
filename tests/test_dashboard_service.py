"""The service page's data (pure): frames per window, PromQL per track, and the shapes the
charts read, with empty denominators left as gaps (no data), never zeros."""

from __future__ import annotations

import math

import pytest

from specd.dashboard.data import service_queries as q
from specd.operator.analysis.promql import SERVICE_LABEL


def test_frames_keep_sixty_points_and_a_rate_over_several_scrapes() -> None:
    five, hour, six = q.Frame.of("5m"), q.Frame.of("1h"), q.Frame.of("6h")
    assert (five.step, five.rate) == (5.0, "60s")
    assert (hour.step, hour.rate) == (60.0, "240s")
    assert (six.step, six.rate) == (360.0, "1440s")
    with pytest.raises(ValueError, match="window must be one of 5m, 1h, 6h"):
        q.Frame.of("2d")


def test_queries_select_the_service_and_split_by_track() -> None:
    frame = q.Frame.of("1h")
    series = q.series_queries("team-a", "chat", frame)
    assert set(series) == set(q.SERIES)
    for promql in series.values():
        assert f'namespace="team-a", {SERVICE_LABEL}="chat"' in promql
        assert "by (track" in promql and "[240s]" in promql
    assert "task_group, le" in series["tpot_p95"]
    snapshots = q.snapshot_queries("team-a", "chat", frame)
    assert set(snapshots) == set(q.SNAPSHOTS)
    assert all("[3600s]" in promql for promql in snapshots.values())


def test_split_drops_empty_denominators_and_sorts_points() -> None:
    matrix = [({"track": "stable"}, [(20.0, 0.5), (10.0, 0.4), (30.0, math.nan)]),
              ({"track": "canary"}, [(10.0, math.inf)])]
    assert q.split(matrix, ("track",)) == {("stable",): [(10.0, 0.4), (20.0, 0.5)]}


def test_phase_shares_and_verify_length_counts() -> None:
    seconds = {("stable", "draft"): 1.0, ("stable", "verify"): 3.0,
               ("canary", "draft"): 0.0, ("canary", "verify"): 0.0}
    assert q.phase_shares(seconds) == {"stable": {"draft": 0.25, "verify": 0.75}}
    buckets = {("stable", "1"): 10.0, ("stable", "2"): 25.0, ("stable", "+Inf"): 30.0,
               ("canary", "1"): 0.0, ("canary", "+Inf"): 0.0}
    assert q.verify_length_counts(buckets) == {"stable": {"1": 10.0, "2": 15.0, "+Inf": 5.0}}
