"""Prompt lookup beside a trained drafter: the choice per row, the learned lookup table,
and per-source online calibration in the engine."""

from __future__ import annotations

import numpy as np
import pytest

from specd.worker.drafters.base import Drafter, DraftRow, Proposal
from specd.worker.drafters.lookup_hybrid import (
    LOOKUP,
    LookupHybridDrafter,
    LookupStats,
    expected_accepted,
)
from specd.worker.drafters.ngram import lookup_match


class FixedDrafter(Drafter):
    """Proposes token 99 at every position with one confidence for all."""

    name = "fixed"

    def __init__(self, conf: float) -> None:
        self.conf = conf
        self.released: list[str] = []

    def propose(self, rows, hidden, generator=None, layers=None):
        return Proposal([[99] * r.k for r in rows], [[self.conf] * r.k for r in rows],
                        [None] * len(rows))

    def release(self, key):
        self.released.append(key)


CTX = [5, 1, 2, 3, 4, 6, 1, 2, 3]  # the suffix [1, 2, 3] matched: lookup proposes [4, 6, 1]


def test_lookup_match_reports_the_matched_length():
    assert lookup_match(np.array(CTX), 3) == ([4, 6, 1], 3)
    assert lookup_match(np.array([7, 8, 9]), 3) == ([], 0)


def test_expected_accepted_is_the_sum_of_survivals():
    assert expected_accepted([0.5, 0.5]) == pytest.approx(0.5 + 0.25)
    assert expected_accepted([]) == 0.0


def test_stats_count_only_what_the_committed_tokens_decide():
    s = LookupStats(max_n=4, k=3, prior=0.5, prior_weight=2.0)
    s.score(3, [4, 6, 1], [4, 6])  # two committed tokens: positions 1-2 decided, 3 unknown
    assert s.reached[3].tolist() == [1, 1, 0] and s.accepted[3].tolist() == [1, 1, 0]
    s.score(3, [4, 6, 1], [4, 7, 1])  # rejected at position 2: position 3 not reached
    assert s.reached[3].tolist() == [2, 2, 0] and s.accepted[3].tolist() == [2, 1, 0]
    assert s.confidence(3, 3) == pytest.approx([(2 + 1) / (2 + 2), (1 + 1) / (2 + 2), 0.5])


def test_greedy_rows_take_the_proposal_expected_to_go_further():
    weak = LookupHybridDrafter(FixedDrafter(0.2))
    p = weak.propose([DraftRow("a", CTX, 3), DraftRow("b", [7, 8, 9], 3)], None)
    # lookup's prior 0.5 per position beats 0.2; no match for "b" keeps the primary's draft
    assert p.tokens == [[4, 6, 1], [99, 99, 99]] and p.sources == [LOOKUP, "fixed"]
    assert p.q[0] is None and p.confidence[0] == [0.5] * 3
    strong = LookupHybridDrafter(FixedDrafter(0.9))
    assert strong.propose([DraftRow("a", CTX, 3)], None).sources == ["fixed"]


def test_every_lookup_is_scored_even_when_not_used():
    d = LookupHybridDrafter(FixedDrafter(0.9))
    d.propose([DraftRow("a", CTX, 3)], None)  # primary wins, the lookup is remembered
    d.propose([DraftRow("a", CTX + [4, 6, 1, 2], 3)], None)  # what was committed next
    assert d.stats.accepted[3].tolist()[:3] == [1, 1, 1]
    d.release("a")
    assert "a" not in d.pending and d.primary.released == ["a"]


def test_sampled_rows_choose_without_looking_at_the_draw():
    """For a sampled row the choice may not depend on the primary's draw (its confidence),
    or the kept drafts would no longer follow q: it uses the running mean instead."""
    d = LookupHybridDrafter(FixedDrafter(0.2))
    d.mean_primary = 10.0  # history says the primary does far better than this draw
    p = d.propose([DraftRow("a", CTX, 3, temperature=0.8)], None)
    assert p.sources == ["fixed"]
    p = d.propose([DraftRow("b", CTX, 3, temperature=0.0)], None)
    assert p.sources == [LOOKUP]  # the greedy row judges by its own confidences


def test_prompt_lookup_needs_a_trained_drafter():
    from specd.worker.engine.api import EngineConfig, EngineError

    with pytest.raises(EngineError, match="prompt_lookup"):
        EngineConfig(drafter="ngram", prompt_lookup=True)


@pytest.mark.model
def test_engine_calibrates_each_source_apart(make_engine, chat_prompt_ids):
    from specd.api.policy import Policy
    from specd.worker.engine.api import GenerationRequest, SamplingParams

    engine = make_engine("semi-ar", Policy(mode="scheduled", k_max=4, max_verify=4),
                         prompt_lookup=True)
    ids = chat_prompt_ids("Repeat exactly, five times, the line: the cat sat on the mat.")
    out = engine.generate([GenerationRequest(ids, SamplingParams(max_tokens=32))])[0]
    assert engine.drafter.name == "semi-ar+lookup" and engine.drafter.lookups_used > 0
    assert set(engine.core.online_calibration) == {"semi-ar", LOOKUP}
    assert out.spec.accepted > 0
