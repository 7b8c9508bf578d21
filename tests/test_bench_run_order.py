"""``group_orders``: the balanced order bench groups take each slice in (pure)."""

from __future__ import annotations

from collections import Counter

import pytest

from specd.worker.bench.run_order import group_orders


@pytest.mark.parametrize("n", range(1, 9))
def test_every_order_is_a_permutation_and_the_first_is_the_groups_own(n: int) -> None:
    orders = group_orders(n)
    assert orders[0] == tuple(range(n))
    assert all(sorted(order) == list(range(n)) for order in orders)
    assert len(orders) == (n if n % 2 == 0 or n == 1 else 2 * n)


@pytest.mark.parametrize("n", range(2, 9))
def test_each_group_takes_each_position_and_follows_each_other_alike(n: int) -> None:
    orders = group_orders(n)
    positions = Counter((g, i) for order in orders for i, g in enumerate(order))
    assert set(positions.values()) == {len(orders) // n}
    assert len(positions) == n * n
    within = Counter(pair for order in orders for pair in zip(order, order[1:], strict=False))
    assert len(within) == n * (n - 1)  # every ordered pair of distinct groups
    assert set(within.values()) == {len(orders) // n}


@pytest.mark.parametrize("n", range(3, 9))
def test_no_group_runs_twice_in_a_row_across_slices(n: int) -> None:
    orders = group_orders(n)
    for before, after in zip(orders, orders[1:] + orders[:1], strict=True):  # the cycle wraps around
        assert before[-1] != after[0], (before, after)


def test_two_groups_alternate_and_none_is_refused() -> None:
    # two groups cannot avoid a repeat at a boundary: AB, BA repeats each once a cycle, alike
    assert group_orders(2) == [(0, 1), (1, 0)]
    with pytest.raises(ValueError, match="at least 1"):
        group_orders(0)


def test_the_command_names_the_cells_whose_places_stay_uneven(capsys) -> None:
    from specd.commands.bench import _warn_uneven_order

    _warn_uneven_order(4, {16: 16, 32: 6})  # 4 groups: a cycle is 4 slices
    _warn_uneven_order(3, {4: 12})  # 3 groups: 6
    lines = capsys.readouterr().err.splitlines()
    assert len(lines) == 1 and "c=32" in lines[0] and "(4 slices a cycle)" in lines[0]


def test_in_turn_cycles_through_the_orders() -> None:
    from specd.worker.bench.run_order import in_turn

    orders = group_orders(3)
    assert [in_turn("abc", t) for t in range(len(orders) + 1)] == (
        [["abc"[i] for i in order] for order in orders] + [list("abc")])
