"""What `kubectl specd` prints and the exit codes of `status` (pure)."""

from __future__ import annotations

from datetime import UTC, datetime

from specd.kubectl import render

NOW = datetime(2026, 12, 1, 12, 0, 0, tzinfo=UTC)


def service(**status) -> dict:
    return {"metadata": {"name": "svc", "namespace": "ns",
                         "creationTimestamp": "2026-12-01T11:00:00Z"},
            "spec": {"rollout": {"strategy": "Canary", "steps": [
                {"weight": 25, "pause": {"duration": "1m"}}, {"weight": 50, "pause": {}},
                {"weight": 100}]}},
            "status": status}


MID = service(phase="Progressing", ready="3/4", stableRevision="aaa", canaryRevision="bbb",
              canaryWeight=50, rollout={"phase": "Paused", "pauseReason": "StepPause",
                                        "step": 1, "setWeight": 50, "successfulChecks": 2,
                                        "message": "step 2/3 (50%): waiting for a promote"},
              analysis=[{"name": "speed", "metric": "tokensPerSecond", "taskGroup": "code",
                         "verdict": "Successful", "canary": 14.2, "stable": 14.0,
                         "value": 1.014, "message": "speed[code]: within bounds",
                         "at": "2026-12-01T11:59:50Z"}])


def test_list_shows_each_rollout_on_one_line() -> None:
    text = render.list_table([MID, service(phase="Ready", ready="4/4", stableRevision="aaa",
                                           rollout={"phase": "Healthy"})], NOW)
    lines = text.splitlines()
    assert lines[0].split() == ["NAME", "PHASE", "READY", "STABLE", "CANARY", "STEP", "WEIGHT",
                                "ROLLOUT", "AGE"]
    assert lines[1].split() == ["svc", "Progressing", "3/4", "aaa", "bbb", "2/3", "50/50",
                                "Paused", "1h"]
    assert lines[2].split() == ["svc", "Ready", "4/4", "aaa", "-", "-", "-", "Healthy", "1h"]
    assert render.list_table([MID], NOW, namespaces=True).splitlines()[1].startswith("ns ")


def test_get_shows_steps_weights_and_the_analysis() -> None:
    text = render.detail(MID)
    assert "Rollout:         Paused (StepPause)" in text
    assert "Weight:          set 50%, actual 50%" in text
    step_rows = [line for line in text.splitlines() if line.startswith("->")]
    assert step_rows == ["->  2     50%     until promoted"]
    assert "speed   code   14.2    14      1.014  Successful" in text
    assert "Checks this step: successful 2" in text


def test_status_exit_codes() -> None:
    assert render.status_line(service(phase="Ready", rollout={"phase": "Healthy"}))[0] == 0
    assert render.status_line(service(phase="Ready"))[0] == 0  # never rolled out
    code, line = render.status_line(service(
        phase="Degraded", rollout={"phase": "RolledBack", "message": "AnalysisFailed: speed"}))
    assert code == 1 and "AnalysisFailed: speed" in line
    assert render.status_line(MID)[0] == render.EXIT_PROGRESSING
    # ready but the rollout is promoting: not healthy yet
    assert render.status_line(service(phase="Ready", rollout={"phase": "Promoting"}))[0] == 3


def test_history_orders_events() -> None:
    events = [{"lastTimestamp": "2026-12-01T11:02:00Z", "type": "Warning",
               "reason": "RolledBack", "message": "AnalysisFailed"},
              {"lastTimestamp": "2026-12-01T11:01:00Z", "type": "Normal",
               "reason": "RolloutStarted", "message": "canary bbb"}]
    rows = render.history(events).splitlines()
    assert "RolloutStarted" in rows[1] and "RolledBack" in rows[2]
    assert "no events" in render.history([])
