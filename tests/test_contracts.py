"""The contracts: policy document validation and versioning, task-group folding."""

from __future__ import annotations

import pytest
from pydantic import ValidationError

from specd.api.metrics import TASK_GROUPS, task_group
from specd.api.policy import Policy, parse_policy


def test_default_policy_is_valid_and_versioned():
    policy = Policy()
    assert policy.mode == "scheduled"
    assert len(policy.version()) == 12
    assert Policy().version() == policy.version()
    assert Policy(k_max=6).version() != policy.version()


def test_policy_round_trips_through_json():
    policy = Policy(mode="fixed", k_max=6, fixed_length=3)
    assert parse_policy(policy.model_dump_json()) == policy


@pytest.mark.parametrize(
    "doc, field",
    [
        ('{"mode": "greedy"}', "mode"),
        ('{"k_max": 0}', "k_max"),
        ('{"survival_floor": 1.5}', "survival_floor"),
        ('{"min_verify": 5, "max_verify": 2}', "min_verify"),
        ('{"fixed_length": 7, "k_max": 4}', "fixed_length"),
        ('{"unknown": 1}', "unknown"),
        ("not json", "json"),
    ],
)
def test_bad_policy_is_refused_naming_the_field(doc, field):
    with pytest.raises(ValidationError, match=field):
        parse_policy(doc)


def test_task_groups_fold_unknown_names():
    assert task_group("Code") == "code"
    assert task_group("poetry") == "other"
    assert task_group(None) == "other"
    assert "other" in TASK_GROUPS


def test_group_overrides_apply_per_task_group_and_version_only_when_set():
    policy = Policy(mode="scheduled", k_max=5)
    # documents written before groups and plain_rounds keep their hash
    assert not {"groups", "plain_rounds"} & set(policy.document())
    assert Policy(plain_rounds=0.05).document()["plain_rounds"] == 0.05
    tuned = Policy(mode="scheduled", k_max=5, groups={
        "code": {"mode": "plain"}, "chat": {"k_max": 3, "max_verify": 3,
                                            "calibration": {"temperature": [1.5]}}})
    assert tuned.version() != policy.version()
    assert tuned.for_group("code").mode == "plain" and tuned.for_group("code").k_max == 5
    chat = tuned.for_group("chat")
    assert (chat.mode, chat.k_max, chat.max_verify, chat.calibration.temperature) == (
        "scheduled", 3, 3, [1.5])
    assert chat.fixed_length == 3  # the base's 5, clamped to the group's k_max
    assert tuned.for_group("structured") is tuned  # no override: the policy itself
    assert parse_policy(tuned.model_dump_json()) == tuned
    assert tuned.document()["groups"] == {"chat": {"k_max": 3, "max_verify": 3,
                                                   "calibration": {"temperature": [1.5],
                                                                   "bias": []}},
                                          "code": {"mode": "plain"}}


@pytest.mark.parametrize("doc, message", [
    ('{"groups": {"poetry": {"mode": "plain"}}}', "unknown task group 'poetry'"),
    ('{"groups": {"code": {"mode": "greedy"}}}', "groups.code.mode"),
    ('{"k_max": 4, "groups": {"chat": {"fixed_length": 6}}}',
     "groups.chat: fixed_length must be <= k_max"),
    ('{"groups": {"chat": {"temperature": 1}}}', "groups.chat.temperature"),
])
def test_bad_group_overrides_are_refused_naming_the_group(doc, message):
    with pytest.raises(ValidationError, match=message):
        parse_policy(doc)
