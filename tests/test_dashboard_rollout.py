"""The rollout page: its content from the object (pure), and the controls' enable/disable
matrix by rollout state and by user, drawn by Streamlit's AppTest."""

from __future__ import annotations

import json

import pytest
from streamlit.testing.v1 import AppTest

from specd.dashboard import auth
from specd.dashboard.config import DashboardConfig
from specd.dashboard.data import rollout as r
from specd.dashboard.views.rollout import ControlError, perform
from specd.operator.rollout.controls import ACTIONS


def canary(phase: str, step: int = 1, **rollout) -> dict:
    return {
        "metadata": {"namespace": "team-a", "name": "chat"},
        "spec": {"rollout": {"strategy": "Canary",
                             "steps": [{"weight": 10}, {"weight": 50, "pause": {}},
                                       {"weight": 80, "pause": {"duration": "5m"}}],
                             "analysis": {"metrics": [
                                 {"name": "speed", "metric": "tokensPerSecond", "min": 0.95},
                                 {"name": "trunc", "metric": "truncationRatio",
                                  "comparison": "absolute", "max": 0.5}]}}},
        "status": {"stableRevision": "aaa", "canaryRevision": "bbb", "canaryWeight": 40,
                   "rollout": {"phase": phase, "step": step, "setWeight": 50, **rollout},
                   "analysis": [{"name": "speed", "metric": "tokensPerSecond",
                                 "taskGroup": "code", "verdict": "Failed", "canary": 4.1,
                                 "stable": 5.0, "value": 0.82, "query": "sum(rate(x[1m]))",
                                 "message": "0.82 < 0.95"},
                                {"name": "trunc", "metric": "truncationRatio",
                                 "taskGroup": None, "verdict": "Inconclusive",
                                 "canary": None, "stable": None, "value": None}]}}


def test_steps_summary_and_analysis_rows() -> None:
    obj = canary("Paused", pauseReason="StepPause")
    assert [(s.index, s.weight, s.pause, s.state) for s in r.steps(obj)] == [
        (1, 10, "-", "done"), (2, 50, "until promoted", "current"), (3, 80, "5m", "next")]
    s = r.summary(obj)
    assert (s.phase, s.step, s.set_weight, s.actual_weight, s.pause_reason) == (
        "Paused", "2/3", 50, 40, "StepPause")
    rows = r.analysis_rows(obj)
    assert rows[0]["threshold"] == ">= 0.95 x stable" and rows[0]["task group"] == "code"
    assert rows[1]["threshold"] == "<= 0.5" and rows[1]["value"] == "no data"
    back = r.summary(canary("RolledBack", message="analysis failed: speed (code) 0.82 < 0.95"))
    assert back.rolled_back == "analysis failed: speed (code) 0.82 < 0.95"


def test_perform_reports_success_and_failure_with_the_actor() -> None:
    sent = []
    user = auth.User("alice@example.com", "oidc")
    line = perform(lambda *a: sent.append(a), "team-a", "chat", "abort", user)
    assert sent == [("team-a", "chat", "abort", "dashboard:alice@example.com")]
    assert line == "Abort sent for team-a/chat as dashboard:alice@example.com"

    def denied(*_):
        raise ControlError("permission denied (the dashboard's RBAC has no patch on "
                           "speculativeservices)")
    assert perform(denied, "team-a", "chat", "promote", user).startswith(
        "Promote failed: permission denied")


PAGE = '''
import json
from specd.dashboard import auth
from specd.dashboard.config import DashboardConfig
from specd.dashboard.views import rollout

case = json.loads({case!r})
cfg = DashboardConfig(controls=case["controls"], allowed_users=("alice",),
                      tokens=(("alice", "a" * 16), ("bob", "b" * 16)))
user = auth.User(case["user"], "token") if case["user"] else None
rollout.render([case["obj"]], cfg=cfg, user=user, act=lambda *a: None,
               history=lambda ns, name: ([], "no history store configured (--history-url)"))
'''


def draw(obj: dict, controls: bool, user: str | None) -> AppTest:
    case = json.dumps({"obj": obj, "controls": controls, "user": user})
    at = AppTest.from_string(PAGE.format(case=case), default_timeout=60).run()
    assert not at.exception, at.exception
    return at


def enabled_buttons(at: AppTest) -> set[str]:
    return {b.key.removeprefix("act-") for b in at.button
            if b.key and b.key.startswith("act-") and not b.disabled}


@pytest.mark.parametrize("phase, expected", [
    ("Progressing", {"promote", "promote-full", "pause", "abort"}),
    ("Paused", {"promote", "promote-full", "resume", "abort"}),
    ("RolledBack", {"retry"}),
    ("Healthy", set()),
])
def test_controls_are_enabled_by_the_rollout_state(phase: str, expected: set[str]) -> None:
    at = draw(canary(phase), controls=True, user="alice")
    assert {b.key for b in at.button} >= {f"act-{a}" for a in ACTIONS}  # all six shown
    assert enabled_buttons(at) == expected


@pytest.mark.parametrize("controls, user, says", [
    (False, "alice", "read-only: controls are off"),
    (True, None, "sign in to use the controls"),
    (True, "bob", "bob is not allowed to act"),
])
def test_no_buttons_at_all_unless_an_allowed_user(controls: bool, user: str | None,
                                                  says: str) -> None:
    at = draw(canary("Paused"), controls=controls, user=user)
    assert not [b for b in at.button if b.key and b.key.startswith("act-")]
    assert any(says in c.value for c in at.caption)


def test_the_page_says_what_the_store_cannot_give() -> None:
    at = draw(canary("RolledBack", message="analysis failed: speed (code)"), False, None)
    assert any("Rolled back: analysis failed: speed (code)" in e.value for e in at.error)
    assert any("no history store configured" in w.value for w in at.warning)


def test_controls_need_an_allow_list_and_a_way_to_sign_in() -> None:
    from specd import SpecdError

    with pytest.raises(SpecdError, match="SPECD_DASHBOARD_ALLOWED_USERS is empty"):
        DashboardConfig.from_env({"SPECD_DASHBOARD_CONTROLS": "enabled"})
    with pytest.raises(SpecdError, match="nobody can sign in"):
        DashboardConfig.from_env({"SPECD_DASHBOARD_CONTROLS": "enabled",
                                  "SPECD_DASHBOARD_ALLOWED_USERS": "alice"})
    cfg = DashboardConfig.from_env({"SPECD_DASHBOARD_CONTROLS": "enabled",
                                    "SPECD_DASHBOARD_ALLOWED_USERS": "alice",
                                    "SPECD_DASHBOARD_TOKENS": f"alice={'x' * 20}"})
    assert auth.token_user(cfg, "x" * 20) == auth.User("alice", "token")
    assert auth.token_user(cfg, "y" * 20) is None and auth.token_user(cfg, "") is None


def test_policy_rows_per_track_and_group() -> None:
    from specd.api.spec import parse_spec
    from specd.dashboard.data import policy

    obj = canary("Progressing")
    obj["spec"].update({"model": {"reference": "smollm2-135m"},
                        "drafter": {"method": "semi-ar", "k": 4},
                        "verification": {"mode": "scheduled", "groups": {"code": {"mode":
                                                                                  "plain"}}},
                        "worker": {"image": "w:1"}})
    obj["spec"]["rollout"]["policyChanges"] = "Canary"
    stable = parse_spec({**obj["spec"], "verification": {"mode": "fixed"}}).policy()
    obj["status"]["policy"] = stable.document()
    tracks = policy.effective(obj)
    by_group = {t: {row["task group"]: row for row in rows} for t, rows in tracks.items()}
    assert by_group["stable"]["chat"]["mode"] == "fixed" and by_group["stable"]["chat"]["K"] == 4
    # the canary runs the edited spec: scheduled, with code held plain
    assert by_group["canary"]["chat"]["mode"] == "scheduled"
    assert by_group["canary"]["code"] == {**by_group["canary"]["code"], "mode": "plain",
                                          "K": "-", "overridden": "yes"}
