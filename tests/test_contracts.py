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
