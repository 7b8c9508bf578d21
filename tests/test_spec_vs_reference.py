"""The in-process goodput-vs-reference bench: its group syntax and how it reads the counters."""

from __future__ import annotations

import argparse

import pytest
from prometheus_client import CollectorRegistry, Counter

from specd.api import metrics as m
from specd.worker.bench.spec_vs_reference import parse_group, positions, rates_by_group


def test_a_group_is_a_name_a_prompt_and_an_optional_temperature() -> None:
    assert parse_group("chat=Count to 3.") == ("chat", "Count to 3.", 0.0)
    assert parse_group("code=Write a story.@1.5") == ("code", "Write a story.", 1.5)
    assert parse_group("mail=Write to a@b.example") == ("mail", "Write to a@b.example", 0.0)
    with pytest.raises(argparse.ArgumentTypeError, match="NAME=TEXT"):
        parse_group("no prompt")


def test_rates_are_read_per_group_and_round_kind_over_every_batch_bucket() -> None:
    registry = CollectorRegistry()
    labels = (m.LABEL_TASK_GROUP, m.LABEL_POLICY_MODE, m.LABEL_ROUND_KIND, m.LABEL_BATCH)
    seconds = Counter(m.DECODE_SECONDS, "s", labels, registry=registry)
    tokens = Counter(m.DECODE_TOKENS, "t", labels, registry=registry)
    for batch, (t, s) in {"1": (30, 1.5), "2": (10, 0.5)}.items():
        tokens.labels("chat", "fixed", "speculative", batch).inc(t)
        seconds.labels("chat", "fixed", "speculative", batch).inc(s)
    tokens.labels("chat", "fixed", "plain", "1").inc(8)
    seconds.labels("chat", "fixed", "plain", "1").inc(0.8)
    assert rates_by_group(registry) == {("chat", "speculative"): (40.0, 2.0),
                                        ("chat", "plain"): (8.0, 0.8)}


def test_positions_are_acceptance_and_prediction_where_reached() -> None:
    registry = CollectorRegistry()
    labels = (m.LABEL_TASK_GROUP, m.LABEL_POSITION)
    accepted = Counter(m.ACCEPTED_PER_POSITION, "a", labels, registry=registry)
    reached = Counter(m.REACHED_PER_POSITION, "r", labels, registry=registry)
    predicted = Counter(m.PREDICTED_PER_POSITION, "p", labels, registry=registry)
    for position, (a, r, p) in {"2": (1, 4, 3.0), "1": (6, 10, 9.0)}.items():
        accepted.labels("chat", position).inc(a)
        reached.labels("chat", position).inc(r)
        predicted.labels("chat", position).inc(p)
    reached.labels("code", "1").inc(0)  # never reached: no ratio
    assert positions(registry)["chat"] == [(0.6, 10.0, 0.9), (0.25, 4.0, 0.75)]
    (code,) = positions(registry)["code"]
    assert code[1] == 0.0 and code[0] != code[0]  # nan
