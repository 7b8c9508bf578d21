"""The decision rule on constructed inputs, and the worked cost examples it rests on."""

from __future__ import annotations

import pytest

from specd.pilot.stats import mean_ci, paired_diff, percentile, t95
from specd.pilot.verdict import RULE, Arm, decide, decode_cost_per_token, end_to_end_speedup


def test_worked_example_cost_per_committed_token() -> None:
    plain = decode_cost_per_token(0.040, 1)
    a = decode_cost_per_token(0.060, 3)
    b = decode_cost_per_token(0.100, 4)
    a_low = decode_cost_per_token(0.060, 1.2)
    assert (plain, a, b, a_low) == pytest.approx((0.040, 0.020, 0.025, 0.050))
    assert a < b < plain < a_low  # "more tokens a round" lost; A at 1.2 tokens is slower
    with pytest.raises(ValueError):
        decode_cost_per_token(0.06, 0)


def test_worked_example_end_to_end() -> None:
    # 7 s of retrieval and input work + 3 s of decoding; decoding halved: 10 s -> 8.5 s
    assert end_to_end_speedup(10.0, 3.0, 2.0) == pytest.approx(10 / 8.5)
    assert round(end_to_end_speedup(10.0, 3.0, 2.0), 2) == 1.18
    assert end_to_end_speedup(10.0, 10.0, 2.0) == pytest.approx(2.0)
    assert end_to_end_speedup(10.0, 0.0, 5.0) == 1.0


def test_statistics() -> None:
    assert percentile([1, 2, 3, 4], 50) == 2.5 and percentile([5], 99) == 5
    assert percentile([], 50) is None
    mu, half = mean_ci([1.0, 2.0, 3.0])
    assert mu == 2.0 and half == pytest.approx(t95(2) * 1 / 3 ** 0.5)
    d = paired_diff([3.0, 4.0, 5.0], [1.0, 2.0, 3.0])
    assert d == (2.0, 2.0, 2.0)


def arm(goodput, p50, p99):
    return Arm(list(goodput), list(p50), list(p99))


def arms(g0, g1, g2):
    return {"G0": g0, "G1": g1, "G2": g2}


SAME = arm([2.0, 2.0, 2.0], [1.0, 1.05, 0.95], [2.0, 2.1, 1.9])
FAST = arm([2.0, 2.0, 2.0], [0.6, 0.62, 0.58], [1.2, 1.3, 1.1])  # same goodput, faster
MORE = arm([3.0, 3.1, 2.9], [0.9, 0.95, 0.85], [1.9, 2.0, 1.8])  # more goodput
LESS = arm([1.5, 1.6, 1.4], [1.4, 1.5, 1.3], [3.0, 3.1, 2.9])


def test_adopt_when_better_at_flat_and_peak_and_burst_not_worse() -> None:
    v = decide(arms(SAME, FAST, SAME), arms(SAME, MORE, SAME), arms(SAME, FAST, SAME),
               0.5, 0.9, 4.0, True)
    assert v.decision == "adopt"
    assert v.traces["flat"].latency_gain_clear and not v.traces["flat"].goodput_gain
    assert v.traces["peak"].goodput_gain


def test_the_baseline_is_the_better_of_g0_and_g2() -> None:
    # G2 (the equal-resource alternative) beats G1 at peak: not adopted, although G1 > G0
    v = decide(arms(SAME, FAST, SAME), arms(SAME, MORE, arm([4, 4, 4], [0.5] * 3, [1] * 3)),
               None, 0.5, 0.9, 4.0, True)
    assert v.traces["peak"].baseline == "G2"
    assert v.decision == "low-load only"


def test_low_load_only_with_the_crossover_load() -> None:
    # flat: G1 40 % faster at the median; peak: 40 % slower -> zero crossing half way
    v = decide(arms(SAME, FAST, SAME), arms(SAME, LESS, SAME), None, 0.5, 0.9, 4.0, True)
    assert v.decision == "low-load only"
    rf = v.traces["flat"].relative_latency_gain
    rp = v.traces["peak"].relative_latency_gain
    assert rf == pytest.approx(0.4) and rp == pytest.approx(-0.4)
    assert v.crossover_load == pytest.approx(0.7)
    assert v.crossover_rps == pytest.approx(2.8)


def test_burst_p99_worse_blocks_adoption() -> None:
    bursty = arm([2.0, 2.0, 2.0], [0.6, 0.62, 0.58], [2.4, 2.5, 2.3])  # p99 +20 %
    v = decide(arms(SAME, FAST, SAME), arms(SAME, MORE, SAME), arms(SAME, bursty, SAME),
               0.5, 0.9, 4.0, True)
    assert v.decision == "low-load only"
    assert v.traces["burst"].p99_ratio == pytest.approx(1.2)


def test_reject_without_a_clear_gain_or_when_the_regression_failed() -> None:
    noisy = arm([2.0, 2.0, 2.0], [0.5, 1.5, 0.9], [2, 2, 2])  # interval spans zero
    assert decide(arms(SAME, noisy, SAME), arms(SAME, MORE, SAME), None, 0.5, 0.9, 4.0,
                  True).decision == "reject"
    assert decide(arms(SAME, LESS, SAME), arms(SAME, LESS, SAME), None, 0.5, 0.9, 4.0,
                  True).decision == "reject"
    v = decide(arms(SAME, FAST, SAME), arms(SAME, MORE, SAME), None, 0.5, 0.9, 4.0, False,
               "greedy (code): different")
    assert v.decision == "reject" and "greedy (code)" in v.reasons[-1]


def test_a_goodput_loss_is_never_outweighed_by_latency() -> None:
    fast_but_dropping = arm([1.0, 1.1, 0.9], [0.5, 0.5, 0.5], [1, 1, 1])
    v = decide(arms(SAME, fast_but_dropping, SAME), arms(SAME, MORE, SAME), None, 0.5, 0.9,
               4.0, True)
    assert v.traces["flat"].goodput_loss and not v.traces["flat"].better
    assert v.decision == "reject"


def test_the_rule_is_written_out() -> None:
    for word in ("adopt", "low-load only", "reject", "crossover", "p99", "G2"):
        assert word in RULE
