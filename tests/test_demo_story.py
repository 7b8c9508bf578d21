"""The demo's story (specd_dev.demo.story): the specs are valid for the CRD's rules the
story relies on, and status changes are told in words. Pure: no cluster."""

from __future__ import annotations

import pytest

from specd.api.spec import ServiceSpec
from specd_dev.demo import story
from specd_dev.demo.summary import Figures, table


def merged(base: dict, patch: dict) -> dict:
    """A JSON merge patch (RFC 7386), as the API server applies it."""
    out = dict(base)
    for key, value in patch.items():
        if value is None:
            out.pop(key, None)
        elif isinstance(value, dict) and isinstance(out.get(key), dict):
            out[key] = merged(out[key], value)
        else:
            out[key] = value
    return out


def stage_specs() -> dict[str, dict]:
    a = story.scheme_a()
    b = merged(a, story.to_scheme_b()["spec"])
    bad = merged(b, story.bad_revision("/var/tmp/x/perturbed")["spec"])
    back = merged(bad, story.back_to_scheme_b()["spec"])
    tuned = merged(back, story.tuning_on()["spec"])
    return {"a": a, "b": b, "bad": bad, "back": back, "tuned": tuned}


def test_every_stage_is_a_valid_service_and_the_story_returns_to_b() -> None:
    specs = stage_specs()
    parsed = {name: ServiceSpec.model_validate(spec) for name, spec in specs.items()}
    assert parsed["a"].effective_mode() == "fixed" and parsed["a"].drafter.method == "parallel"
    assert parsed["b"].effective_mode() == "scheduled" and parsed["b"].drafter.method == "semi-ar"
    assert parsed["bad"].drafter.method == "ngram" and parsed["bad"].effective_mode() == "fixed"
    # after the rollback the spec is B's again, so the stable track's version is desired
    assert specs["back"] == specs["b"]
    assert parsed["tuned"].tuning.enabled and "plain" in parsed["tuned"].tuning.bounds.modes
    # the bad revision keeps the model name clients send
    assert "--served-model-name=smollm2-135m" in specs["bad"]["engine"]["extraArgs"]


def status(**fields) -> dict:
    return {"phase": "Progressing", **fields}


def test_tell_says_each_change_once() -> None:
    first = status(rollout={"phase": "Progressing", "step": 0, "message": "waiting"})
    assert story.tell(None, first) == ["service Progressing", "rollout Progressing: waiting"]
    assert story.tell(first, first) == []  # nothing changed: nothing said
    measured = {**first, "canaryWeight": 50, "analysis": [
        {"name": "speed", "metric": "tokensPerSecond", "taskGroup": "chat",
         "verdict": "Successful", "value": 1.25, "message": "speed[chat]: 1.25 within"},
        {"name": "speed", "metric": "tokensPerSecond", "taskGroup": "code",
         "verdict": "Inconclusive", "message": "too few requests on the canary track"},
        {"name": "lossless", "metric": "losslessProbe", "verdict": "Failed", "value": 1.0,
         "message": "outputs differ at position 5"}]}
    lines = story.tell(first, measured)
    assert lines == ["rollout Progressing, canary weight 50%: waiting",
                     "  analysis: speed[chat] Successful (1.25); speed[code] Inconclusive "
                     "(too few requests); lossless Failed"]
    assert story.tell(measured, measured) == []


def test_a_tuner_change_is_told_and_found() -> None:
    before = status(tuning={"groups": {"code": {"mode": "scheduled", "action": "hold"}}})
    after = status(tuning={"groups": {"code": {"mode": "plain", "action": "plain",
                                               "reason": "goodput 0.9x plain",
                                               "lastChange": "2026-12-02T06:00:00Z"}}})
    watch = story.TunerWatch("code")
    assert not watch(before)  # a hold is no change
    assert watch(after) and watch.changed and watch.entry["mode"] == "plain"
    assert story.tell(before, after) == ["  tuner: code -> plain (plain): goodput 0.9x plain"]


def test_a_group_held_on_its_data_three_intervals_in_a_row_is_a_verdict_too() -> None:
    def hold(run: str, reason: str) -> dict:
        return status(tuning={"lastRun": run, "groups": {"code": {
            "mode": "scheduled", "action": "hold", "reason": reason}}})

    watch = story.TunerWatch("code", intervals=3)
    within = "goodput 6.1 tok/s is within 3 % of true plain 6.0"
    seen = [watch(hold("t1", within)), watch(hold("t1", within)),  # the same interval twice
            watch(hold("t2", "too few requests (4 < 8)")),  # not judged: the streak restarts
            watch(hold("t3", within)), watch(hold("t4", within))]
    assert seen == [False] * 5 and watch.judged == 2
    assert watch(hold("t5", within)) and not watch.changed
    assert watch.entry["reason"] == within


@pytest.mark.parametrize(("rollout", "stable", "ended"), [
    ({"phase": "RolledBack"}, "old", True),
    ({"phase": "Healthy"}, "new", True),  # promoted: the stable revision moved on
    ({"phase": "Healthy"}, "old", False),  # not started yet
    ({"phase": "Progressing"}, "new", False),
])
def test_a_rollout_has_ended_when_rolled_back_or_promoted(rollout, stable, ended) -> None:
    assert story.rollout_ended({"rollout": rollout, "stableRevision": stable}, "old") is ended


def test_the_summary_says_no_data_never_zero() -> None:
    figures = {"A": Figures("45s", {"tau": 1.36, "acceptance": 0.14, "tokens_per_s": 5.2,
                                    "tpot_p95": 0.237}),
               "B": Figures("45s", {"tau": None, "acceptance": None, "tokens_per_s": 0.0,
                                    "tpot_p95": None})}
    rows = table(figures)
    assert rows[2] == "| A | 1.36 | 14 % | 5.2 | 237 ms |"
    assert rows[3] == "| B | no data | no data | 0.0 | no data |"


def test_evidence_is_one_line_without_bookkeeping() -> None:
    line = story.evidence_summary({"ece": 0.098363, "positions": 1, "state": {"x": 1},
                                   "acceptance_by_position": [0.25806, 0.14758],
                                   "decision": "ECE 0.098 > 0.05"})
    assert line == "ece 0.098, positions 1, acceptance_by_position [0.258, 0.148]"
