"""The draft gate's measurement on its own: recorded rounds in, cost ratio out (no model)."""

from __future__ import annotations

import math
from collections.abc import Callable

import pytest

from specd.worker.engine.draft_outcomes import DraftOutcomes


def alternate(out: DraftOutcomes, bucket: int, rounds: int, drafting: tuple[float, int],
              plain: tuple[float, int] = (0.020, 4)) -> None:
    """``rounds`` drafting and as many plain rounds in turn: (seconds, committed) each."""
    for _ in range(rounds):
        out.record(bucket, True, *drafting, plain_seconds_per_token=0.005)
        out.record(bucket, False, *plain, plain_seconds_per_token=0.005)


def test_drafting_and_plain_rounds_compare_per_committed_token():
    out = DraftOutcomes(ema=0.5, min_rounds=2)
    alternate(out, 4, 2, drafting=(0.030, 8))  # 0.75 of plain's time a token
    # no round has the other kind's two rounds before it and two after: not priced yet
    assert out.pairs(4) == 0 and out.cost_ratio(4) is None and out.drafting_wins(4) is None
    alternate(out, 4, 2, drafting=(0.030, 8))
    assert out.pairs(4) == 2  # the 4th and 5th of 8: both sides complete
    assert out.drafting_wins(4) is True
    assert out.measured_ratio(4) == out.cost_ratio(4) == pytest.approx(0.75)
    assert out.drafting_wins(4, margin=0.3) is False  # 0.75 is not below 0.7
    assert out.drafting_wins(8) is None  # buckets are separate
    alternate(out, 4, 6, drafting=(0.035, 5))  # drafting turns slow: 7 tokens' time buys 5
    assert out.drafting_wins(4) is False
    out.record(4, True, seconds=0.0, committed=0, plain_seconds_per_token=0.005)  # ignored
    assert out.count(4, True) == 10


def test_tokens_weigh_not_rounds():
    """Bursty acceptance: rounds committing 1 and 7 tokens alternate at the same time each.
    Per token that is 8 tokens per 2 rounds (1.25 / 4 = 0.31 s a token, against plain's 0.6:
    a ratio of 0.52), although the mean of per-round ratios would say 1.2."""
    out = DraftOutcomes(ema=0.05, min_rounds=1)
    for i in range(40):
        out.record(1, True, seconds=1.25, committed=1 if i % 2 else 7,
                   plain_seconds_per_token=1.0)
        out.record(1, False, seconds=0.6, committed=1, plain_seconds_per_token=1.0)
    assert out.cost_ratio(1) == pytest.approx(1.25 / 4 / 0.6, rel=0.05)
    assert out.drafting_wins(1) is True


def probed(rounds: int, ratio: float, probe_drafts: bool, slowness: Callable[[int], float],
           every: int = 17) -> list[tuple[bool, float]]:
    """(drafted, seconds) of one-row rounds committing one token each, round i taking
    ``slowness(i)`` times its kind's cost; one kind runs every ``every``-th round (the
    gate's probes, after 16 rounds of alternation while it learns), the other the rest.
    ``ratio``: what a drafting round really costs per token against a plain one."""
    out = []
    for i in range(rounds):
        minority = i % 2 == 0 if i < 16 else i % every == 0
        drafted = minority if probe_drafts else not minority
        out.append((drafted, slowness(i) * (ratio if drafted else 1.0)))
    return out


def drifting(i: int) -> float:
    """A machine whose speed swings by +-20 % over 300 rounds."""
    return 1.0 + 0.2 * math.sin(2 * math.pi * i / 300)


@pytest.mark.parametrize("ratio, probe_drafts", [(1.04, True), (0.96, False),
                                                 (0.9, True), (1.1, False)])
def test_a_machine_that_drifts_does_not_turn_the_comparison(ratio, probe_drafts):
    """Probes lie 17 rounds and more apart, so each kind's own running mean covers different
    minutes: a drafting loss of 4 % read as a win whenever the machine had just slowed down
    (a bench cell at c=32 drafted on such a "win"). Priced against the other kind's rounds
    around it, the comparison holds at every round, whichever kind the probes run."""
    out = DraftOutcomes()
    verdicts = set()
    for drafted, seconds in probed(1500, ratio, probe_drafts, drifting):
        out.record(1, drafted, seconds, 1, 1.0)
        if out.drafting_wins(1) is not None:
            verdicts.add(out.drafting_wins(1))
            assert out.cost_ratio(1) == pytest.approx(ratio, rel=0.02)
    assert verdicts == {ratio < 1.0}


def warming(i: int) -> float:
    """An engine whose rounds slow after each start: 60 % slower over its first ~50 rounds,
    then level, in cells of 150 rounds (bfloat16 rounds of 32 rows went from 61 to 110 ms
    over a bench cell's first 40 rounds)."""
    return 1.0 + 0.6 * (1.0 - math.exp(-(i % 150) / 25))


@pytest.mark.parametrize("ratio, probe_drafts", [(1.04, True), (0.96, False),
                                                 (1.04, False), (0.96, True)])
def test_rounds_that_slow_down_do_not_read_as_a_difference(ratio, probe_drafts):
    """Priced against the other kind's rounds before it only, a round on a slowing engine
    reads dearer than it is: the ratio came out 2.5-3.5 % off, towards either kind,
    whichever ran as probes. Priced against rounds on both sides, the trend cancels."""
    out = DraftOutcomes()
    seen = 0
    for drafted, seconds in probed(1500, ratio, probe_drafts, warming):
        out.record(1, drafted, seconds, 1, 1.0)
        if out.measured_ratio(1) is not None:
            seen += 1
            assert out.measured_ratio(1) == pytest.approx(ratio, rel=0.01)
    assert seen > 1400


def test_only_fresh_rounds_of_the_other_kind_on_both_sides_price_a_round():
    out = DraftOutcomes()
    out.record(1, True, 1.0, 1, 1.0)  # one drafting round, then plain ones only
    for _ in range(3 * DraftOutcomes.FRESH):
        out.record(1, False, 1.0, 1, 1.0)
    assert out.pairs(1) == 0  # no round has the other kind on both sides
    out.record(1, True, 1.0, 1, 1.0)  # a probe: two plain rounds before it ...
    out.record(1, False, 1.0, 1, 1.0)
    assert out.pairs(1) == 0
    out.record(1, False, 1.0, 1, 1.0)  # ... and two after: priced
    assert out.pairs(1) == 1 and out.cost_ratio(1) == pytest.approx(1.0)
    for _ in range(2 * DraftOutcomes.FRESH):  # drafting rounds: near plain rounds on one
        out.record(1, True, 1.0, 1, 1.0)  # side at most
    out.record(1, False, 1.0, 1, 1.0)
    out.record(1, False, 1.0, 1, 1.0)
    assert out.pairs(1) == 1
    assert DraftOutcomes().cost_ratio(1) is None


def test_no_round_is_priced_across_an_idle_spell():
    """A bench cell's engine stops and starts again minutes later (a server's traffic pauses):
    the rounds on either side are a few rounds apart, not a few moments."""
    out = DraftOutcomes()
    alternate(out, 1, 4, drafting=(0.030, 8))
    measured = out.pairs(1)
    assert measured == 2  # the 4th and 5th of 8
    out.pause()
    alternate(out, 1, 1, drafting=(0.030, 8))  # these two would complete the last two rounds
    assert out.pairs(1) == measured
    alternate(out, 1, 3, drafting=(0.030, 8))  # after the spell, pairs come as at the start
    assert out.pairs(1) == measured + 2
