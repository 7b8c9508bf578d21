"""`kubectl specd history` from the history store, without a cluster: rows written the way the
operator writes them (the real canary state machine, ``tick_writes`` and the ``Recorder``),
read back by ``specd.operator.history.queries`` on SQLite and PostgreSQL, then the command
end to end on a SQLite file (output and exit codes: no rows, no file, a dead server, a
database never migrated, a password never printed)."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import replace
from datetime import UTC, datetime, timedelta
from pathlib import Path

import pytest

from specd.kubectl import cli, render
from specd.operator.analysis.judge import Result
from specd.operator.history import store
from specd.operator.history.recorder import Recorder, tick_writes
from specd.operator.rollout.canary import Config, Measurement, Seen, Step, advance
from specd.operator.rollout.controls import ACTOR_ANNOTATION
from specd.operator.rollout.state import RolloutState

T0 = datetime(2026, 12, 1, 10, 0, 0, tzinfo=UTC)
STEPS = (Step(25, pause_s=60), Step(50, until_promoted=True), Step(100))


class Operator:
    """Ticks like the reconciler, every 10 s: Deployments are Ready at once, analysis answers
    ``verdict``, every tick's rows go through the Recorder right after the tick."""

    def __init__(self, recorder: Recorder, namespace: str = "ns", name: str = "svc") -> None:
        self.recorder = recorder
        self.meta = {"namespace": namespace, "name": name, "uid": f"uid-{name}",
                     "annotations": {}}
        self.state, self.seen = RolloutState(), Seen(None, 0)
        self.now = T0.timestamp()
        self.verdict = "Successful"
        self.config = Config(steps=STEPS, analysis=True, interval_s=30)

    def act(self, actor: str, **control: object) -> None:
        """A control patch: the spec field and the actor annotation, as controls.patch."""
        self.meta["annotations"] = {ACTOR_ANNOTATION: actor}
        self.config = replace(self.config, **control)  # type: ignore[arg-type]

    def tick(self, desired: str) -> None:
        self.now += 10
        results: list[Result] = []

        def measure() -> Measurement:
            for group in ("chat", "code"):
                results.append(Result(name="speed", metric="tokensPerSecond", task_group=group,
                                      verdict=self.verdict,  # type: ignore[arg-type]
                                      message=f"speed[{group}]: {self.verdict}", canary=14.2,
                                      stable=14.0, value=1.014, query="q"))
            return Measurement(self.verdict, "speed")  # type: ignore[arg-type]

        before = self.state
        plan = advance(self.config, 2, desired, before, self.seen, self.now, measure)
        self.state = plan.state
        canary = plan.canary
        self.seen = Seen(plan.stable.version, plan.stable.replicas,
                         canary.version if canary else None, canary.replicas if canary else 0)
        for what, write in tick_writes({"metadata": self.meta}, before, plan, results, "60s",
                                       self.now):
            self.recorder.write(what, write)

    def until(self, desired: str, phase: str, limit: int = 60) -> None:
        for _ in range(limit):
            self.tick(desired)
            if self.state.phase == phase:
                return
        raise AssertionError(f"{phase} not reached: {self.state}")


def record_four_rollouts(url: str) -> None:
    """aaa -> bbb promoted by alice; -> ccc aborted by bob; -> ddd rolled back on analysis;
    -> eee superseded by fff, which is still paused at step 2."""
    store.upgrade(url)
    recorder = Recorder(store.HistoryStore(url))
    op = Operator(recorder)
    try:
        op.tick("aaa")  # the first deployment: no rollout
        op.until("bbb", "Paused")  # step 1 passes on its pause and analysis; step 2 waits
        op.act("kubectl-specd/alice", promote_id="p1")
        op.until("bbb", "Healthy")
        op.until("ccc", "Paused")
        op.act("kubectl-specd/bob", abort=True)
        op.until("ccc", "RolledBack")
        op.act("kubectl-specd/bob", abort=False)  # the spec moves on to ddd
        op.verdict = "Failed"
        op.until("ddd", "RolledBack")
        op.verdict = "Successful"
        op.until("eee", "Progressing", limit=3)
        op.until("fff", "Paused")
        recorder.flush()
    finally:
        recorder.close()


@pytest.fixture(params=["sqlite", "postgresql"])
def url(request, tmp_path) -> Iterator[str]:
    url = f"sqlite:///{tmp_path / 'history.db'}" if request.param == "sqlite" \
        else request.getfixturevalue("postgres")
    yield url
    store.downgrade(url)


def test_the_read_returns_every_rollout_newest_first_with_its_events(url: str) -> None:
    record_four_rollouts(url)
    reader = store.HistoryStore(url)
    try:
        rollouts = reader.rollouts("ns", "svc")
        measured = reader.rollouts("ns", "svc", measurements=True, limit=2)
        assert reader.rollout_count("ns", "svc") == 5
        assert reader.rollouts("ns", "other") == []
    finally:
        reader.close()
    assert [(r.stable, r.canary, r.outcome) for r in rollouts] == [
        ("bbb", "fff", None), ("bbb", "eee", "Superseded"), ("bbb", "ddd", "RolledBack"),
        ("bbb", "ccc", "RolledBack"),  # aborted, then replaced: it stays RolledBack
        ("aaa", "bbb", "Promoted")]
    fff, eee, ddd, ccc, bbb = rollouts
    assert all(r.started_at.tzinfo is not None for r in rollouts)  # UTC on SQLite too
    assert [r.started_at for r in rollouts] == sorted((r.started_at for r in rollouts),
                                                      reverse=True)
    # who decided: the promoting user, the aborting user, the operator on analysis
    assert bbb.decided_by == "kubectl-specd/alice"
    assert ccc.decided_by == "kubectl-specd/bob"
    assert ddd.decided_by == "specd-operator" and ddd.message.startswith("AnalysisFailed")
    assert fff.in_progress and fff.decided_by is None and fff.ended_at is None
    assert bbb.duration() == bbb.ended_at - bbb.started_at > timedelta(seconds=60)
    actions = [e.action for e in bbb.events]
    assert actions[0] == "RolloutStarted" and actions[-1] == "RolloutCompleted"
    assert "StepCompleted" in actions and "StepPromoted" in actions
    promoted = next(e for e in bbb.events if e.action == "StepPromoted")
    assert (promoted.step, promoted.weight, promoted.actor) == (2, 100, "kubectl-specd/alice")
    assert [e.at for e in bbb.events] == sorted(e.at for e in bbb.events)
    assert ddd.events[-1].action == "RolledBack" and ddd.events[-1].actor == "specd-operator"
    assert ccc.events[-1].action == "RolledBack" and ccc.events[-1].actor == "kubectl-specd/bob"
    assert eee.outcome == "Superseded" and eee.ended_at == fff.started_at
    assert bbb.measurement_count >= 2 and bbb.measurements == ()  # counted, not loaded
    assert [r.canary for r in measured] == ["fff", "eee"]
    m = measured[0].measurements
    assert len(m) == measured[0].measurement_count >= 2
    assert {x.task_group for x in m} == {"chat", "code"}
    assert (m[0].metric, m[0].canary, m[0].stable, m[0].verdict) == (
        "tokensPerSecond", 14.2, 14.0, "Successful")


def test_the_renderer_shows_each_rollout_then_its_events(tmp_path: Path) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    record_four_rollouts(url)
    reader = store.HistoryStore(url)
    rollouts = reader.rollouts("ns", "svc", measurements=True)
    reader.close()
    now = rollouts[0].started_at + timedelta(minutes=5)
    text = render.rollout_history(rollouts, now)
    blocks = text.split("\n\n")
    assert len(blocks) == 5
    head = blocks[0].splitlines()[0]
    assert head.startswith("2026-12-01T") and "bbb -> fff  in progress  running 5m00s" in head
    promoted = blocks[-1].splitlines()
    assert "aaa -> bbb  Promoted  " in promoted[0]
    assert promoted[0].endswith("by kubectl-specd/alice")
    assert promoted[1].split() == ["TIME", "STEP", "WEIGHT", "ACTION", "ACTOR", "REASON"]
    assert any(line.split()[1:5] == ["3", "100%", "StepPromoted", "kubectl-specd/alice"]
               for line in promoted)
    assert "analysis measurements (--measurements shows them)" in promoted[-1]
    assert "by kubectl-specd/bob" in blocks[3].splitlines()[0]
    assert "ddd  RolledBack" in blocks[2] and "AnalysisFailed" in blocks[2]
    with_m = render.rollout_history(rollouts, now, measurements=True).split("\n\n")[-1]
    assert "    Measurements (" in with_m
    assert any(line.split()[2:] == ["speed", "tokensPerSecond", "chat", "14.2", "14",
                                    "1.014", "Successful"] for line in with_m.splitlines())
    more = render.rollout_history(rollouts[:2], now, total=5)
    assert more.endswith("(the newest 2 of 5 rollouts; --limit N shows more)")
    assert render.rollout_history([], now) == "no rollouts recorded"
    assert [render.duration(timedelta(seconds=s)) for s in (45, 303, 7620, 273600)] == [
        "45s", "5m03s", "2h07m", "3d04h"]


def test_kubectl_specd_history_reads_the_store(tmp_path: Path, capsys, monkeypatch) -> None:
    url = f"sqlite:///{tmp_path / 'h.db'}"
    record_four_rollouts(url)
    monkeypatch.delenv("SPECD_HISTORY_URL", raising=False)
    assert cli.main(["-n", "ns", "history", "svc", "--history-url", url]) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"ns/svc: 5 rollouts, newest first (history store {url})")
    assert "aaa -> bbb  Promoted" in out and "StepPromoted" in out
    assert "Measurements (" not in out

    monkeypatch.setenv("SPECD_HISTORY_URL", url)  # the environment's store, --limit
    assert cli.main(["-n", "ns", "history", "svc", "--measurements", "--limit", "1"]) == 0
    out = capsys.readouterr().out
    assert out.startswith("ns/svc: 5 rollouts") and "bbb -> fff" in out
    assert "aaa -> bbb" not in out and "Measurements (" in out
    assert "(the newest 1 of 5 rollouts; --limit N shows more)" in out

    assert cli.main(["-n", "ns", "history", "nothing"]) == 0
    assert capsys.readouterr().out.strip() == (
        f"no rollouts of ns/nothing in the history store {url}")


def test_an_unreadable_store_is_exit_4_with_the_masked_url(tmp_path: Path, capsys,
                                                           monkeypatch) -> None:
    monkeypatch.delenv("SPECD_HISTORY_URL", raising=False)
    missing = f"sqlite:///{tmp_path / 'none.db'}"
    assert cli.main(["-n", "ns", "history", "svc", "--history-url", missing]) == 4
    err = capsys.readouterr().err
    assert err.startswith(f"error: history store {missing} cannot be read: no such file")
    assert not (tmp_path / "none.db").exists()  # reading never creates one

    dead = "postgresql+psycopg://specd:s3cret@127.0.0.1:1/specd"
    assert cli.main(["-n", "ns", "history", "svc", "--history-url", dead]) == 4
    captured = capsys.readouterr()
    assert "s3cret" not in captured.err + captured.out
    assert "history store postgresql+psycopg://specd:***@127.0.0.1:1/specd cannot be read" \
        in captured.err
    assert "Traceback" not in captured.err

    empty = tmp_path / "empty.db"
    empty.touch()  # a file, never migrated
    assert cli.main(["-n", "ns", "history", "svc", "--history-url", f"sqlite:///{empty}"]) == 4
    assert "not migrated: specd db upgrade" in capsys.readouterr().err

    assert cli.main(["-n", "ns", "history", "svc", "--history-url", "not a url"]) == 2
    assert "not a database URL" in capsys.readouterr().err


def test_without_a_store_history_prints_events_and_points_at_the_store(capsys,
                                                                       monkeypatch) -> None:
    class FakeClient:
        default_namespace = "ns"

        def __init__(self, *_: object) -> None:
            pass

        def events(self, namespace: str, name: str) -> list[dict]:
            assert (namespace, name) == ("ns", "svc")
            return [{"lastTimestamp": "2026-12-01T11:01:00Z", "type": "Normal",
                     "reason": "RolloutStarted", "message": "canary bbb"}]

    monkeypatch.delenv("SPECD_HISTORY_URL", raising=False)
    monkeypatch.setattr(cli, "Client", FakeClient)
    assert cli.main(["history", "svc"]) == 0
    captured = capsys.readouterr()
    assert "RolloutStarted" in captured.out
    assert "--history-url" in captured.err and "SPECD_HISTORY_URL" in captured.err
    monkeypatch.setenv("SPECD_HISTORY_URL", "none")  # the operator's "no store"
    assert cli.main(["history", "svc"]) == 0
    assert "RolloutStarted" in capsys.readouterr().out


def test_policy_changes_read_newest_first_with_their_evidence(url: str) -> None:
    from specd.operator.history import read

    writer = store.HistoryStore(url)
    store.upgrade(url)
    for minute, (group, action) in enumerate((("code", "plain"), ("code", "speculate"),
                                              ("chat", "recalibrate"))):
        assert writer.policy_change(
            namespace="ns", service="svc", uid="u", task_group=group,
            at=T0 + timedelta(minutes=minute), reason=action, before={"mode": "fixed"},
            after={"mode": action}, evidence={"decision": f"{group}: {action}"},
            applied=action != "recalibrate")
    writer.close()
    found = read.policy_changes(url, "ns", "svc")
    assert [(c.task_group, c.action, c.applied) for c in found] == [
        ("chat", "recalibrate", False), ("code", "speculate", True), ("code", "plain", True)]
    assert found[-1].evidence == {"decision": "code: plain"} and found[0].at.tzinfo is not None
    assert read.policy_changes(url, "ns", "other") == []
    assert len(read.policy_changes(url, "ns", "svc", limit=1)) == 1
