"""The tuner's pure decision on recorded metric windows: hysteresis, dwell, stabilisation,
plain with a growing back-off (never a latch), bounds, pins, holds that say why."""

from __future__ import annotations

from dataclasses import replace

from specd.operator.tuner.decide import Bounds, GroupPolicy, Settings, State, Window, decide

S = Settings(dwell_s=300, backoff_s=600, max_backoff_s=2400)
INTERVAL = 60.0
K3 = GroupPolicy(mode="scheduled", k=3)


def window(t: float, acc: tuple[float, ...], goodput: float = 30.0, plain: float = 25.0,
           requests: float = 100, verified: tuple[float, ...] | None = None) -> Window:
    return Window(end=t, requests=requests, goodput=goodput, plain_goodput=plain,
                  plain_samples=500, acceptance_by_position=acc,
                  verified_by_position=verified or tuple(500.0 for _ in acc))


ANY = Bounds()


def run(windows: list[Window | None], policy: GroupPolicy = K3, bounds: Bounds = ANY):
    """Feed windows one interval apart; return every decision."""
    out, state = [], State()
    for w in windows:
        now = w.end if w is not None else (out[-1][0] + INTERVAL if out else 0.0)
        d = decide(w, policy, state, bounds, now, S)
        policy, state = d.policy, d.state
        out.append((now, d))
    return [d for _, d in out]


def changes(decisions) -> list[str]:
    return [d.action for d in decisions if d.changed]


def test_a_naive_threshold_flips_every_window_this_rule_does_not() -> None:
    """The last position's acceptance wobbles around 0.4 (0.35, 0.45, ...): a single-threshold
    rule (shrink below 0.4, grow above) changes K every window; with a dead band, consecutive
    windows and a dwell, nothing changes."""
    accs = [0.35 if i % 2 == 0 else 0.45 for i in range(20)]
    naive_k, flips = 3, 0
    for acc in accs:
        new = naive_k - 1 if acc < 0.4 else naive_k + 1
        flips += new != naive_k
        naive_k = new
    assert flips == 20
    decisions = run([window(i * INTERVAL, (0.8, 0.6, acc)) for i, acc in enumerate(accs)])
    assert changes(decisions) == []
    assert all("dead band" in d.reason for d in decisions)


def test_a_poor_tail_is_dropped_after_two_windows_and_growth_needs_three() -> None:
    low = [window(i * INTERVAL, (0.8, 0.5, 0.1)) for i in range(3)]
    decisions = run(low)
    assert [d.action for d in decisions] == ["hold", "shrink", "hold"]
    assert decisions[1].policy.k == 2 and "position 3 accepts 0.10" in decisions[1].reason
    assert "dwell" in decisions[2].reason
    # growth: slower, three windows in a row, and only after the dwell
    good = [window(i * INTERVAL, (0.9, 0.8, 0.7)) for i in range(8)]
    decisions = run(good)
    assert changes(decisions) == ["grow"]
    first = next(i for i, d in enumerate(decisions) if d.changed)
    assert first == 2 and decisions[first].policy.k == 4
    assert "1/3 windows agree" in decisions[0].reason


def test_a_window_without_evidence_breaks_the_streak_and_says_why() -> None:
    windows = [window(0, (0.8, 0.5, 0.1)), window(60, (0.8, 0.5, 0.1), requests=3),
               window(120, (0.8, 0.5, 0.1))]
    decisions = run(windows)
    assert changes(decisions) == []
    assert "too few requests (3 < 20)" in decisions[1].reason
    assert decide(None, K3, State(), Bounds(), 0, S).reason == "no data in the window"
    thin = window(0, (0.8, 0.5, 0.1), verified=(10, 5, 1))
    assert "too few verified" in decide(thin, K3, State(), Bounds(), 0, S).reason


def test_a_rarely_verified_tail_is_not_worth_drafting() -> None:
    rare = [window(i * INTERVAL, (0.8, 0.6, 0.5), verified=(1000, 400, 20)) for i in range(2)]
    decisions = run(rare)
    assert changes(decisions) == ["shrink"] and "verified in 2%" in decisions[1].reason


def test_a_losing_group_goes_plain_and_is_re_probed_with_a_doubling_back_off() -> None:
    losing = [window(i * INTERVAL, (0.3, 0.2, 0.1), goodput=20.0, plain=25.0)
              for i in range(60)]
    decisions = run(losing)
    kinds = changes(decisions)
    assert kinds[:3] == ["plain", "speculate", "plain"]
    times = [i * INTERVAL for i, d in enumerate(decisions) if d.changed]
    plain_spells = [times[i + 1] - times[i] for i in range(0, len(times) - 1, 2)]
    assert plain_spells[0] >= 600 and plain_spells[1] >= 1200  # the back-off doubles
    assert "20% below true plain" in decisions[1].reason
    # a speculative group that only loses on acceptance but not on goodput stays
    winning = run([window(i * INTERVAL, (0.3, 0.3, 0.3), goodput=30.0, plain=25.0)
                   for i in range(5)])
    assert "plain" not in changes(winning)


def test_bounds_pins_and_a_canary_hold() -> None:
    low = [window(i * INTERVAL, (0.5, 0.1)) for i in range(4)]
    at_floor = run(low, policy=GroupPolicy("fixed", 2), bounds=Bounds(k_min=2))
    assert changes(at_floor) == []
    no_plain = run([window(i * INTERVAL, (0.3,), goodput=10, plain=25) for i in range(4)],
                   policy=GroupPolicy("fixed", 1), bounds=Bounds(modes=("fixed",), k_min=1))
    assert "plain" not in changes(no_plain)
    pinned = decide(low[0], K3, State(), Bounds(), 0, S, pinned=True)
    assert not pinned.changed and "pinned" in pinned.reason
    frozen = decide(low[0], K3, State(), Bounds(), 0, S, frozen="a canary is progressing")
    assert not frozen.changed and "canary" in frozen.reason


def test_steady_load_after_convergence_changes_at_most_once() -> None:
    """Noisy but steady windows around a good policy: at most one change in 10 intervals."""
    import random

    rng = random.Random(7)
    windows = [window(i * INTERVAL, (0.8 + rng.uniform(-0.05, 0.05),
                                     0.55 + rng.uniform(-0.08, 0.08),
                                     0.35 + rng.uniform(-0.08, 0.08)),
                      goodput=30 + rng.uniform(-3, 3), plain=25 + rng.uniform(-2, 2))
               for i in range(10)]
    assert len(changes(run(windows))) <= 1


def test_evidence_carries_the_window() -> None:
    w = window(0, (0.8, 0.5, 0.1))
    d = decide(w, K3, replace(State(), recent=("shrink",), recent_k=(2,)), Bounds(), 0, S)
    assert d.action == "shrink"
    assert d.evidence["requests"] == 100 and d.evidence["acceptance_by_position"] == [0.8, 0.5,
                                                                                      0.1]


def test_a_broken_streak_says_so_and_counts_only_windows_in_a_row() -> None:
    """plain, dead band, plain: the streak is one window, not two (CI once read
    "2/2 windows agree so far" on a hold)."""
    losing = dict(goodput=20.0, plain=25.0)
    decisions = run([window(0, (0.8, 0.6, 0.4), **losing), window(INTERVAL, (0.8, 0.6, 0.4)),
                     window(2 * INTERVAL, (0.8, 0.6, 0.4), **losing),
                     window(3 * INTERVAL, (0.8, 0.6, 0.4), **losing)])
    assert [d.action for d in decisions] == ["hold", "hold", "hold", "plain"]
    assert decisions[2].reason.endswith("1/2 windows agree so far"), decisions[2].reason
