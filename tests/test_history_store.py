"""The history store on SQLite and on a real PostgreSQL (Debian's binaries, a throwaway
server: conftest's ``postgres``): upgrade head from empty, the models and the migrations
agree, idempotent writes, a full rollout's rows read back, downgrade base; `specd db` on the
command line."""

from __future__ import annotations

from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest
from alembic.autogenerate import compare_metadata
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, inspect

from specd.cli import main as specd_main
from specd.operator.history import store
from specd.operator.history.models import Base

T0 = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
TABLES = {"rollouts", "rollout_events", "analysis_measurements", "policy_changes",
          "pilot_verdicts"}


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path) -> str:
    if request.param == "sqlite":
        return f"sqlite:///{tmp_path / 'history.db'}"
    return request.getfixturevalue("postgres")


def test_migrations_from_empty_to_head_and_back(url: str) -> None:
    assert store.current(url) is None
    store.upgrade(url)
    assert store.current(url) == "0002"
    engine = create_engine(url)
    try:
        assert TABLES <= set(inspect(engine).get_table_names())
        with engine.connect() as conn:  # the models and the migrations agree
            assert compare_metadata(MigrationContext.configure(conn), Base.metadata) == []
    finally:
        engine.dispose()
    store.downgrade(url)
    engine = create_engine(url)
    try:
        assert not TABLES & set(inspect(engine).get_table_names())
    finally:
        engine.dispose()


def test_a_full_rollout_is_recorded_once_whatever_the_retries(url: str) -> None:
    store.upgrade(url)
    history = store.HistoryStore(url)
    try:
        key = dict(namespace="ns", service="svc", uid="u-1", stable="aaa", canary="bbb",
                   started_at=T0)
        rollout = history.rollout(**key)
        assert history.rollout(**key) == rollout  # a re-run finds the same rollout
        steps = [(T0, 0, 25, "RolloutStarted", None), (T0 + timedelta(minutes=2), 0, 25,
                                                       "StepCompleted", None),
                 (T0 + timedelta(minutes=3), 1, 50, "StepPromoted", "kubectl-specd/alice"),
                 (T0 + timedelta(minutes=5), 2, 100, "RolloutCompleted", None)]
        for at, step, weight, action, actor in steps:
            assert history.event(rollout, at=at, step=step, weight=weight, action=action,
                                 actor=actor)
            assert not history.event(rollout, at=at, step=step, weight=weight, action=action,
                                     actor=actor)  # the same write after a restart
        for group in ("chat", "code"):
            assert history.measurement(rollout, at=T0 + timedelta(minutes=1), step=0,
                                       name="speed", metric="tokensPerSecond",
                                       task_group=group, window="60s", verdict="Successful",
                                       canary=14.2, stable=14.0, value=1.014, query="q")
        assert not history.measurement(rollout, at=T0 + timedelta(minutes=1), step=0,
                                       name="speed", metric="tokensPerSecond",
                                       task_group="code", window="60s", verdict="Successful")
        history.finish(rollout, at=T0 + timedelta(minutes=4), outcome="RolledBack")
        history.finish(rollout, at=None, outcome=None)  # a retry reopens it
        history.finish(rollout, at=T0 + timedelta(minutes=5), outcome="Promoted")
        assert history.policy_change(namespace="ns", service="svc", uid="u-1",
                                     task_group="code", at=T0, reason="FallbackToPlain",
                                     before={"mode": "scheduled"}, after={"mode": "plain"},
                                     evidence={"windows": 3, "goodput_ratio": 0.91})
        assert not history.policy_change(namespace="ns", service="svc", uid="u-1",
                                         task_group="code", at=T0, reason="FallbackToPlain",
                                         before={}, after={}, evidence={})
        (past,) = history.history("ns", "svc")
        assert past["outcome"] == "Promoted" and past["measurements"] == 2
        assert [e["action"] for e in past["events"]] == [s[3] for s in steps]
        assert past["events"][2]["actor"] == "kubectl-specd/alice"
    finally:
        history.close()
        store.downgrade(url)


def test_specd_db_on_the_command_line(tmp_path: Path, capsys) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    assert specd_main(["db", "current", url]) == 0
    assert "empty" in capsys.readouterr().out
    assert specd_main(["db", "upgrade", url]) == 0
    assert capsys.readouterr().out.strip() == "0002"
    assert specd_main(["db", "downgrade", url]) == 0
    assert specd_main(["db", "current", "postgresql+psycopg://u:secret@127.0.0.1:1/x"]) == 2
    assert "secret" not in capsys.readouterr().err  # no password in the message
    assert specd_main(["db", "upgrade", "not a url"]) == 2




def test_the_recorder_writes_a_ticks_rows_and_survives_a_dead_store(tmp_path: Path) -> None:
    from prometheus_client import generate_latest

    from specd.operator import metrics
    from specd.operator.history.recorder import Recorder, tick_writes
    from specd.operator.rollout.canary import Event, Plan, Track
    from specd.operator.rollout.state import RolloutState

    url = f"sqlite:///{tmp_path / 'h.db'}"
    store.upgrade(url)
    owner = {"metadata": {"namespace": "ns", "name": "svc", "uid": "u-9",
                          "annotations": {"serving.specd.io/last-action-by": "kubectl-specd/bob"}}}
    before = RolloutState(stable="aaa", canary="bbb", started_at=T0.timestamp() + 0.6, step=0)
    after = RolloutState(stable="aaa", canary="bbb", started_at=T0.timestamp(), step=1)
    plan = Plan(Track("aaa", 2), Track("bbb", 2), after, weight=50,
                events=(Event("Normal", "StepPromoted", "promoted by a user to step 2"),))
    recorder = Recorder(store.HistoryStore(url))
    for what, write in tick_writes(owner, before, plan, [], "60s", T0.timestamp() + 60):
        recorder.submit(what, write)
    recorder.flush()
    recorder.close()
    reader = store.HistoryStore(url)
    (row,) = reader.history("ns", "svc")  # one rollout: the key is kept to whole seconds
    assert [(e["action"], e["step"], e["actor"]) for e in row["events"]] == [
        ("StepPromoted", 1, "kubectl-specd/bob")]
    reader.close()

    dead = Recorder(store.HistoryStore(f"sqlite:///{tmp_path / 'missing' / 'x.db'}"),
                    retries=1, backoff_s=0.01)
    before_errors = generate_latest(metrics.REGISTRY).decode()
    for what, write in tick_writes(owner, before, plan, [], "60s", T0.timestamp() + 60):
        dead.submit(what, write)  # never raises: the rollout goes on
    dead.flush()
    dead.close()
    after_errors = generate_latest(metrics.REGISTRY).decode()
    line = 'specd_operator_store_write_errors_total{kind="write"}'
    count = [float(x.split()[-1]) for x in after_errors.splitlines() if x.startswith(line)]
    previous = [float(x.split()[-1]) for x in before_errors.splitlines() if x.startswith(line)]
    assert count and count[0] >= (previous[0] if previous else 0) + 1
