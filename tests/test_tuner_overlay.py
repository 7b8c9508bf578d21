"""The tuned overlay: how spec, per-group overrides, pins and the tuner's status overlay
render into the one policy document the workers run."""

from __future__ import annotations

from specd.api.policy import GroupPolicy
from specd.api.spec import parse_spec
from specd.operator.status import replacing
from specd.operator.tuner.overlay import overlay_document, read_overlay

BASE = {"model": {"reference": "smollm2-135m"}, "worker": {"image": "specd-worker:dev"},
        "drafter": {"method": "semi-ar", "k": 4}}


def spec(**fields):
    return parse_spec({**BASE, **fields})


def test_spec_groups_override_the_spec_for_their_requests() -> None:
    policy = spec(verification={"mode": "scheduled", "groups": {
        "code": {"mode": "plain"}, "chat": {"k": 2, "maxVerify": 2}}}).policy()
    assert policy.for_group("code").mode == "plain"
    chat = policy.for_group("chat")
    assert (chat.k_max, chat.max_verify, chat.fixed_length) == (2, 2, 2)
    assert policy.for_group("structured").k_max == 4
    assert policy.plain_rounds == 0  # no tuning: no reference rounds


def test_the_overlay_applies_only_with_tuning_on_and_never_to_a_pinned_group() -> None:
    tuned = {"code": GroupPolicy(mode="plain"), "chat": GroupPolicy(k_max=3)}
    off = spec().policy(tuned)
    assert off.groups == {} and off.version() == spec().policy().version()
    on = spec(tuning={"enabled": True, "pinnedGroups": ["chat"], "referenceShare": 0.1},
              verification={"groups": {"chat": {"k": 2}}}).policy(tuned)
    assert on.for_group("code").mode == "plain"
    assert on.for_group("chat").k_max == 2  # pinned: the spec's value, not the tuner's 3
    assert on.plain_rounds == 0.1
    # the tuner's fields go on top of the spec's own group entry
    merged = spec(tuning={"enabled": True},
                  verification={"groups": {"code": {"survivalFloor": 0.2}}}).policy(tuned)
    assert (merged.for_group("code").mode, merged.for_group("code").survival_floor) == (
        "plain", 0.2)


def test_read_overlay_drops_what_does_not_validate() -> None:
    owner = {"status": {"tuning": {"overlay": {"code": {"mode": "plain"},
                                               "chat": {"k_max": 99}}}}}
    assert read_overlay(owner) == {"code": GroupPolicy(mode="plain")}
    assert read_overlay({}) == {}
    assert overlay_document({"code": GroupPolicy(mode="plain"), "chat": GroupPolicy()}) == {
        "code": {"mode": "plain"}, "chat": None}


def test_replacing_nulls_what_the_new_document_dropped() -> None:
    before = {"mode": "fixed", "groups": {"code": {"mode": "plain"}}, "k_max": 4}
    assert replacing(before, {"mode": "fixed", "k_max": 4}) == {
        "mode": "fixed", "k_max": 4, "groups": None}
    assert replacing(before, {"groups": {"chat": {"k_max": 2}}}) == {
        "groups": {"chat": {"k_max": 2}, "code": None}, "mode": None, "k_max": None}
    assert replacing(None, {"a": 1}) == {"a": 1}


def test_an_overlay_the_spec_no_longer_takes_is_left_out() -> None:
    from specd.operator.tuner.overlay import render_policy

    s = spec(tuning={"enabled": True})
    # each field valid, together not (a hand-edited status): the spec's policy, not Degraded
    owner = {"status": {"tuning": {"overlay": {"chat": {"min_verify": 3, "max_verify": 2}}}}}
    assert render_policy(s, owner) == s.policy()
    good = {"status": {"tuning": {"overlay": {"code": {"mode": "plain"}}}}}
    assert render_policy(s, good).for_group("code").mode == "plain"
