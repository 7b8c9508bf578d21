"""Scheduler: B* on synthetic cost tables and survival matrices, contiguity, bounds, modes."""

from __future__ import annotations

import itertools
import time
from dataclasses import replace

import numpy as np
import pytest

from specd.api.policy import Calibration, Policy
from specd.worker.engine.scheduler import CostTable, calibrate, schedule, survival


def brute_force(policy: Policy, confs, base: int, costs: CostTable) -> float:
    """Best objective over every per-request prefix length combination (tiny cases)."""
    best = -1.0
    surv = [survival(c) for c in confs]
    caps = [min(len(c), policy.max_verify, policy.k_max) for c in confs]
    for combo in itertools.product(*[range(c + 1) for c in caps]):
        ok = all(v >= min(policy.min_verify, cap) for v, cap in zip(combo, caps, strict=True))
        ok = ok and all(v <= policy.min_verify or s[v - 1] >= policy.survival_floor
                        for v, s in zip(combo, surv, strict=True))
        if not ok or base + sum(combo) > policy.max_batch_tokens:
            continue
        value = (len(confs) + sum(s[:v].sum() for s, v in zip(surv, combo, strict=True)))
        best = max(best, value / float(costs.cost(base + sum(combo))))
    return best


def test_cost_table_is_monotone_and_interpolates():
    t = CostTable.from_measurements([8, 1, 4, 16], [0.09, 0.05, 0.04, 0.2])
    assert t.tokens == (1, 4, 8, 16)
    assert list(t.seconds) == sorted(t.seconds)
    assert t.seconds[:2] == (0.04, 0.04)  # the 0.05 at 1 token was noise above the 4-token time
    assert t.cost(6) == pytest.approx(0.065)
    assert t.cost(32) == pytest.approx(0.2 + 16 * (0.2 - 0.09) / 8)  # last slope
    with pytest.raises(ValueError):
        CostTable.from_measurements([1, 1], [0.1, 0.2])


def test_cost_table_pads_where_a_bigger_forward_is_cheaper():
    """Measured on this CPU: 2 and 3 tokens cost more than 4 (tiny-M GEMM); the dense part of
    the grid pads up to the cheapest size at or above, the sparse part only smooths noise."""
    t = CostTable.from_measurements([1, 2, 3, 4, 5, 6, 8, 16], [37, 64, 90, 59, 77, 69, 80, 70])
    assert t.pad_to == (1, 4, 4, 4, 6, 6)
    assert t.seconds == (37, 59, 59, 59, 69, 69, 70, 70)
    assert CostTable.from_measurements([2, 4], [1.0, 2.0]).pad_to == ()  # no dense start
    # a size measured cheaper by less than PAD_MARGIN is not taken for a saving: no padding
    # (it would do work for nothing), and the table prices the sizes alike
    flat = CostTable.from_measurements([1, 2, 3, 4], [72.8, 73.4, 73.4, 72.1])
    assert flat.pad_to == (1, 2, 3, 4) and flat.seconds == (72.1,) * 4
    assert CostTable.flat().pad_to == ()


def test_a_lone_row_pads_only_past_its_own_wider_margin():
    """One row's sizes read flat within a few percent where weights dominate (the Xeon): a
    size timed 5 % cheaper is noise there, while a kernel step of 12 % (the EPYC's 3 -> 4)
    still pads, chosen and confirmed."""
    flat_ish = ([1, 2, 3, 4, 5], [61.0, 61.5, 62.0, 62.0, 58.9])  # 5: 5 % below 4
    assert CostTable.from_measurements(*flat_ish).pad_to == (5, 5, 5, 5, 5)
    one_row = CostTable.from_measurements(*flat_ish, margin=CostTable.ONE_ROW_PAD_MARGIN)
    assert one_row.pad_to == (1, 2, 3, 4, 5)
    step = CostTable.from_measurements([1, 2, 3, 4], [50.0, 52.0, 56.0, 50.0],
                                       margin=CostTable.ONE_ROW_PAD_MARGIN)
    assert step.pad_to == (1, 2, 4, 4)
    fresh = {3: 56.5, 4: 50.5}  # the step again: kept
    assert step.with_confirmed_padding(fresh, CostTable.ONE_ROW_PAD_MARGIN).pad_to == (1, 2, 4, 4)
    fresh = {3: 53.0, 4: 50.5}  # 4.7 % this time: dropped under the one-row margin
    assert step.with_confirmed_padding(fresh, CostTable.ONE_ROW_PAD_MARGIN).pad_to == (1, 2, 3, 4)
    assert step.with_confirmed_padding(fresh).pad_to == (1, 2, 4, 4)  # not under the main one


def test_a_padding_is_kept_only_where_fresh_timings_confirm_it():
    """The first timings chose each pad as the least of many noisy sizes (1..4 here); a pad
    stays only where timings taken after the choice find the bigger size cheaper by more than
    PAD_MARGIN too, and a size the fresh timings lack is no saving."""
    from specd.worker.engine.cost import CONFIRM_REPEATS, _confirm_padding

    chosen = CostTable.from_measurements([1, 2, 3, 4, 5], [30.0, 31.0, 33.0, 27.0, 40.0])
    assert chosen.pad_to == (4, 4, 4, 4, 5)
    asked: list[tuple[list[list[int]], int]] = []

    def timing(shapes: list[list[int]], times: int) -> list[float]:
        asked.append((shapes, times))
        fresh = {1: 30.0, 2: 27.5, 3: 33.0, 4: 28.0}  # 4: 7 % below 1, above 2
        return [fresh[sum(shape)] for shape in shapes]

    confirmed = _confirm_padding(chosen, lambda t: [t], timing)
    assert asked == [([[1], [2], [3], [4]], CONFIRM_REPEATS)]  # only the pads' sizes, once
    assert confirmed.pad_to == (4, 2, 4, 4, 5)
    assert confirmed.seconds == chosen.seconds  # the prices stay the first timings'
    assert chosen.with_confirmed_padding({1: 30.0}).pad_to == (1, 2, 3, 4, 5)
    unpadded = CostTable.from_measurements([1, 2], [1.0, 2.0])
    assert _confirm_padding(unpadded, lambda t: [t], timing) is unpadded and len(asked) == 1


def test_a_lone_row_pads_by_the_one_row_table():
    """The main table's 3 tokens are three one-token rows; a lone request verifying two drafts
    is one row of 3, whose own step (dearer than 4, measured on the EPYC) only the one-row
    table has. Without it, a lone row pads by nothing of its own (the runner falls back to
    the main table's)."""
    main = CostTable.from_measurements([1, 2, 3, 4], [25.0, 30.0, 33.0, 36.0])
    one_row = CostTable.from_measurements([1, 2, 3, 4], [26.6, 25.2, 32.4, 28.9])
    assert main.pad_to == (1, 2, 3, 4) and one_row.pad_to == (2, 2, 4, 4)
    with_rows = replace(main, by_rows=((1, one_row), (2, CostTable.flat())))
    assert with_rows.one_row_pad_to() == (2, 2, 4, 4)
    assert with_rows.pad_to == (1, 2, 3, 4)
    assert main.one_row_pad_to() == ()
    assert replace(main, by_rows=((2, one_row),)).one_row_pad_to() == ()


@pytest.mark.parametrize("seed", range(20))
def test_scheduled_budget_is_optimal_and_contiguous(seed):
    rng = np.random.default_rng(seed)
    n = int(rng.integers(1, 4))
    confs = [list(rng.uniform(0.05, 1.0, size=int(rng.integers(0, 5)))) for _ in range(n)]
    # staircase cost: flat inside a tile, jumps at tile boundaries (GPU-style)
    stair = CostTable.from_measurements([1, 4, 5, 8, 9, 12], [1.0, 1.0, 1.6, 1.6, 2.2, 2.2])
    linear = CostTable.from_measurements([1, 32], [1.0, 1.0 + 31 * 0.08])
    for costs in (stair, linear, CostTable.flat()):
        policy = Policy(mode="scheduled", k_max=8, max_verify=int(rng.integers(1, 6)),
                        min_verify=0, survival_floor=float(rng.choice([0.0, 0.2])),
                        fixed_length=1)
        sched = schedule(policy, confs, n, costs)
        got = sched.expected_tokens / sched.cost
        assert got == pytest.approx(brute_force(policy, confs, n, costs))
        for c, v in zip(confs, sched.lengths, strict=True):
            assert 0 <= v <= min(len(c), policy.max_verify)
            s = survival(c)
            assert v == 0 or s[v - 1] >= policy.survival_floor


def test_staircase_cost_fills_the_tile():
    """A flat cost up to 8 tokens: verify everything that fits the tile, cut past it."""
    costs = CostTable.from_measurements([1, 8, 9, 64], [1.0, 1.0, 2.0, 2.0])
    confs = [[0.9, 0.8, 0.7, 0.6, 0.5]] * 2
    sched = schedule(Policy(mode="scheduled", k_max=5, survival_floor=0.0), confs, 2, costs)
    assert sum(sched.lengths) == 6  # 2 base + 6 = the 8-token tile; the 9th would double cost
    assert sched.lengths == [3, 3]


def test_rounds_are_priced_by_their_row_count():
    """Measured with one token per row, 4 tokens cost 4 rows' per-row work; a lone request's
    4 tokens are one row, nearly as cheap as 1 token: its table must keep the tail. Tables
    are picked by the fewest measured rows >= the round's."""
    rows_of_one = CostTable.from_measurements([1, 2, 4, 8], [1.0, 1.1, 1.3, 2.0])
    one_row = CostTable.from_measurements([1, 2, 3, 4], [1.0, 1.0, 1.01, 1.02])
    four_rows = CostTable.from_measurements([4, 8, 12, 16], [1.3, 1.4, 1.5, 1.6])
    costs = CostTable(rows_of_one.tokens, rows_of_one.seconds,
                      by_rows=((1, one_row), (4, four_rows)))
    assert costs.for_rows(1) is one_row
    assert costs.for_rows(2) is four_rows and costs.for_rows(4) is four_rows
    assert costs.for_rows(5) is costs  # more rows than measured: the rows-of-one table
    assert rows_of_one.for_rows(1) is rows_of_one  # nothing measured by rows
    policy = Policy(mode="scheduled", k_max=3, fixed_length=3, survival_floor=0.0)
    conf = [[0.5, 0.3, 0.2]]
    assert schedule(policy, conf, 1, costs.for_rows(1)).lengths == [3]
    assert schedule(policy, conf, 1, costs).lengths == [2]  # priced as rows: the tail is cut


def test_round_overhead_keeps_a_tail_that_the_forward_step_alone_would_cut():
    """The rate is per second of the whole round: a step in the forward's cost (2 -> 4 tokens
    here, as measured for one row on the dev CPU) weighs less once the round's drafting time
    is counted, and a low-survival tail that did not pay for the step alone now does."""
    one_row = CostTable.from_measurements([1, 2, 3, 4], [0.01872, 0.01872, 0.02045, 0.02045])
    policy = Policy(mode="scheduled", k_max=3, fixed_length=3, survival_floor=0.0)
    conf = [[0.24, 0.3, 0.5]]  # survivals 0.24, 0.072, 0.036
    assert schedule(policy, conf, 1, one_row).lengths == [1]
    kept = schedule(policy, conf, 1, one_row, overhead=0.004)
    assert kept.lengths == [3] and kept.cost == pytest.approx(0.02045)  # cost: the forward's
    # a confident draft is verified whole either way; a hopeless one stays cut even so
    assert schedule(policy, [[0.9, 0.9, 0.9]], 1, one_row).lengths == [3]
    assert schedule(policy, [[0.02, 0.02, 0.02]], 1, one_row, overhead=0.004).lengths[0] <= 1


def test_busy_batch_cuts_tails():
    """Same confidences: a light batch verifies long prefixes, a busy one (steep cost) cuts."""
    conf = [0.8, 0.6, 0.5, 0.4, 0.3]
    cheap = CostTable.from_measurements([1, 256], [1.0, 1.1])
    steep = CostTable.from_measurements([1, 8, 256], [1.0, 1.4, 40.0])
    policy = Policy(mode="scheduled", k_max=5, survival_floor=0.0)
    light = schedule(policy, [conf], 1, cheap).lengths
    busy = schedule(policy, [conf] * 32, 32, steep).lengths
    assert light == [5]
    assert max(busy) < 5 and sum(busy) < 32 * 5


def test_bounds_min_max_floor_budget():
    confs = [[0.99] * 6, [0.01] * 6]
    costs = CostTable.from_measurements([1, 100], [1.0, 50.0])  # steep: the scheduler wants 0
    p = Policy(mode="scheduled", k_max=6, fixed_length=1, min_verify=2, max_verify=4,
               survival_floor=0.5)
    sched = schedule(p, confs, 2, costs)
    assert sched.lengths[1] == 2  # min_verify holds even below the floor
    assert all(2 <= v <= 4 for v in sched.lengths)
    tight = Policy(mode="scheduled", k_max=6, fixed_length=1, max_verify=6,
                   survival_floor=0.0, max_batch_tokens=5)
    sched = schedule(tight, confs, 2, CostTable.flat())
    assert 2 + sum(sched.lengths) <= 5


def test_modes_agree_where_they_should():
    confs = [[0.9, 0.9, 0.9], [0.5, 0.5], []]
    flat = CostTable.flat()
    assert schedule(Policy(mode="plain"), confs, 3, flat).lengths == [0, 0, 0]
    fixed = schedule(Policy(mode="fixed", k_max=4, fixed_length=2), confs, 3, flat).lengths
    assert fixed == [2, 2, 0]
    # flat cost, no floor, max_verify = fixed length: scheduled verifies exactly what fixed does
    sched = schedule(Policy(mode="scheduled", k_max=4, fixed_length=2, max_verify=2,
                            survival_floor=0.0), confs, 3, flat).lengths
    assert sched == fixed
    # all-zero confidence: scheduled == plain
    zero = schedule(Policy(mode="scheduled", survival_floor=0.01), [[0.0] * 4] * 3, 3, flat)
    assert zero.lengths == [0, 0, 0]


def test_policy_calibration_applies():
    cal = Calibration(temperature=[2.0], bias=[0.0])
    assert calibrate([0.5, 0.9], cal)[0] == pytest.approx(0.5)
    assert 0.5 < calibrate([0.9], cal)[0] < 0.9  # temperature > 1 softens confidence
    assert calibrate([0.9], Calibration()) == [0.9]


def test_scheduling_overhead_is_small():
    """Measured and printed (not asserted against a time): one round at 32 requests x K=8."""
    rng = np.random.default_rng(0)
    confs = [list(rng.uniform(0.2, 1.0, 8)) for _ in range(32)]
    costs = CostTable.from_measurements([1, 8, 32, 128, 256], [0.055, 0.06, 0.09, 0.25, 0.45])
    policy = Policy(mode="scheduled", k_max=8, max_verify=8)
    t0 = time.perf_counter()
    reps = 50
    for _ in range(reps):
        sched = schedule(policy, confs, 32, costs)
    per_round = (time.perf_counter() - t0) / reps
    print(f"\nscheduling overhead: {per_round * 1e3:.3f} ms per round (32 requests, K=8); "
          f"{100 * per_round / sched.cost:.2f}% of the predicted forward time")
    assert sum(sched.lengths) > 0


def test_worth_drafting_skips_the_drafter_when_plain_wins():
    from specd.worker.engine.scheduler import worth_drafting

    policy = Policy(mode="scheduled", k_max=5, survival_floor=0.0)
    conf = [0.8, 0.7, 0.6, 0.5, 0.4]
    cpu = CostTable.from_measurements([1, 6, 8, 128, 256], [0.055, 0.085, 0.082, 0.38, 0.9])
    assert worth_drafting(policy, 1, conf, 1, cpu, draft_seconds=0.01)
    assert not worth_drafting(policy, 1, conf, 1, cpu, draft_seconds=0.2)  # drafter too slow
    assert not worth_drafting(policy, 1, [0.05] * 5, 1, cpu, draft_seconds=0.01)  # no survival
    steep = CostTable.from_measurements([1, 32, 33, 256], [0.1, 0.12, 0.5, 4.0])
    assert not worth_drafting(policy, 32, conf, 32, steep, draft_seconds=0.02)  # busy batch
    assert not worth_drafting(policy, 0, conf, 0, cpu, draft_seconds=0.0)


def test_online_calibration_corrects_overconfidence():
    from specd.worker.engine.scheduler import OnlineCalibration

    cal = OnlineCalibration(prior=1.0)
    assert cal.apply([0.8, 0.6]) == [0.8, 0.6]  # no evidence yet: unchanged
    for r in range(400):  # predicted 0.6 at position 1, but only 30% accepted
        cal.update([0.6, 0.6], verified=2, accepted=1 if r % 10 < 3 else 0)
    c = cal.apply([0.6, 0.6])
    assert c[0] == pytest.approx(0.3, abs=0.01)
    assert c[1] < 0.6  # position 2 reached 120 times, never accepted
    assert cal.reached[0] == 400 and cal.accepted[0] == 120
    # unverified positions teach nothing
    before = list(cal.reached)
    cal.update([0.9, 0.9, 0.9], verified=0, accepted=0)
    assert cal.reached == before


def test_rows_of_different_groups_share_one_forward():
    """Per-row policies (each request's task group): plain rows verify nothing, fixed rows
    their length, and scheduled rows share what is left of the budget, the rate counting
    every row's tokens."""
    base = Policy(mode="scheduled", k_max=4, max_verify=4, survival_floor=0.0)
    plain, fixed = base.model_copy(update={"mode": "plain"}), Policy(mode="fixed", k_max=4,
                                                                       fixed_length=2)
    confs = [[0.9] * 4, [0.9] * 4, [0.9] * 4]
    flat = CostTable.flat()
    mixed = schedule(base, confs, 3, flat, rows=[plain, fixed, base])
    assert mixed.lengths == [0, 2, 4]
    assert mixed.expected_tokens == pytest.approx(3 + survival([0.9] * 4)[:2].sum()
                                                  + survival([0.9] * 4).sum())
    # one policy for every row: the same as passing none
    for policy in (base, fixed, plain):
        assert schedule(policy, confs, 3, flat, rows=[policy] * 3) == schedule(policy, confs, 3, flat)
    # the budget binds the fixed rows first; scheduled rows get what is left
    tight = base.model_copy(update={"max_batch_tokens": 3 + 3})
    assert sorted(schedule(tight, confs, 3, flat, rows=[fixed, fixed, base]).lengths) == [0, 1, 2]
    assert schedule(tight, confs, 3, flat, rows=[fixed, fixed, base]).lengths[2] == 0
    # a steep step after 3 tokens: the scheduled row's drafts do not pay for the whole batch
    steep = CostTable.from_measurements([1, 5, 6], [1.0, 1.0, 50.0])
    assert schedule(base, confs, 3, steep, rows=[fixed, plain, base]).lengths == [2, 0, 0]
    with pytest.raises(ValueError, match="one policy per request"):
        schedule(base, confs, 3, flat, rows=[base])
