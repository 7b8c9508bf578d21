"""Prompt lookup and its learned per-request confidence."""

from __future__ import annotations

import numpy as np

from specd.worker.drafters.base import DraftRow
from specd.worker.drafters.ngram import NgramDrafter, lookup


def test_lookup_prefers_a_full_continuation():
    toks = np.array([1, 2, 3, 4, 5, 9, 1, 2, 3, 7, 1, 2])
    assert lookup(toks, 3) == [3, 7, 1]  # latest match of [1, 2] with 3 tokens after it
    assert lookup(np.array([5, 6, 7]), 2) == []


def test_confidence_learns_from_committed_tokens():
    d = NgramDrafter(prior=0.5, prior_weight=2.0)
    ctx = [1, 2, 3, 4, 1, 2]
    p = d.propose([DraftRow("r", ctx, 2)], None)
    assert p.tokens == [[3, 4]] and p.confidence == [[0.5, 0.5]]
    # both drafts accepted (+ a bonus): positions 1 and 2 reached and accepted
    ctx = ctx + [3, 4, 1]
    p = d.propose([DraftRow("r", ctx, 2)], None)
    assert p.confidence[0] == [(1 + 1) / (1 + 2)] * 2
    # next proposal rejected at the first position
    assert p.tokens == [[2, 3]]
    ctx = ctx + [8]
    d.propose([DraftRow("r", ctx, 2)], None)
    h = d.history["r"]
    assert h.reached == [2, 1] and h.accepted == [1, 1]
    d.release("r")
    assert "r" not in d.history
