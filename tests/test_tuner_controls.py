"""Pinning a task group (one merge patch, guarded by resourceVersion) and what
``kubectl specd policy`` prints from status.tuning."""

from __future__ import annotations

import pytest

from specd.kubectl.render import policy_table
from specd.operator.rollout.controls import ACTOR_ANNOTATION
from specd.operator.tuner.controls import pin_patch


def obj(pinned=None, tuning_status=None) -> dict:
    return {"metadata": {"name": "svc", "resourceVersion": "42"},
            "spec": {"tuning": {"enabled": True, **({"pinnedGroups": pinned}
                                                   if pinned is not None else {})}},
            "status": {"tuning": tuning_status} if tuning_status else {}}


def test_pin_and_unpin_patch_the_whole_list_guarded_by_resource_version() -> None:
    patch = pin_patch(obj(["code"]), "chat", True, "kubectl-specd/ada")
    assert patch["spec"] == {"tuning": {"pinnedGroups": ["chat", "code"]}}
    assert patch["metadata"]["resourceVersion"] == "42"
    assert patch["metadata"]["annotations"][ACTOR_ANNOTATION] == "kubectl-specd/ada"
    assert pin_patch(obj(["code"]), "code", True, "a")["spec"]["tuning"]["pinnedGroups"] == [
        "code"]  # pinning twice is one pin
    assert pin_patch(obj(["code", "chat"]), "code", False, "a")["spec"]["tuning"][
        "pinnedGroups"] == ["chat"]
    assert pin_patch(obj(), "chat", False, "a")["spec"]["tuning"]["pinnedGroups"] == []
    with pytest.raises(ValueError, match="unknown task group 'poetry'"):
        pin_patch(obj(), "poetry", True, "a")


def test_policy_table_shows_each_group_its_pin_and_reason() -> None:
    status = {"lastRun": "2026-12-01T10:00:00Z", "groups": {
        "code": {"mode": "plain", "k": 4, "lastChange": "2026-12-01T09:59:00Z",
                 "holdUntil": "2026-12-01T10:04:00Z", "reason": "goodput 6 tok/s is 40% below"},
        "chat": {"mode": "fixed", "k": 4, "reason": "pinned by the user (spec.tuning)"}}}
    text = policy_table(obj(["chat"], status))
    lines = {line.split()[0]: line.split() for line in text.splitlines()[2:]}
    assert text.startswith("tuning: on, last interval 2026-12-01T10:00:00Z")
    assert lines["chat"][:4] == ["chat", "fixed", "4", "yes"]
    assert lines["code"][:5] == ["code", "plain", "4", "no", "2026-12-01T09:59:00Z"]
    assert "no task group judged yet" in policy_table(obj())
