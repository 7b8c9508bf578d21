"""The order the groups of a bench run take each slice in: a balanced (Williams) design.

Alternating the order from slice to slice (ABCD, DCBA, ABCD, ...) put every group in every
place, but ran the two end groups twice in a row across each slice boundary (D then D, A then
A) and the middle ones never. In issue 26's loaded runs Scheme B, listed in the middle, read
below the plain twin listed at the end in 9 of 10 cells, and above it in one run with the
order turned: the order was suspect, and a design should not leave it so. In a Williams
design, over one cycle of orders every group takes every place equally often and, within a
slice, follows every other group equally often; from three groups up no group runs twice in
a row, across slice boundaries included (the cycle wraps around). A cell whose slices are
whole cycles is balanced exactly (any run of that many consecutive slices is one cycle); a
shorter one still never repeats a group, but its places stay uneven."""

from __future__ import annotations

from collections.abc import Sequence
from typing import TypeVar

T = TypeVar("T")


def in_turn(items: Sequence[T], turn: int) -> list[T]:
    """``items`` in the order the ``turn``-th slice (counted from 0) takes them."""
    orders = group_orders(len(items))
    return [items[i] for i in orders[turn % len(orders)]]


def group_orders(n: int) -> list[tuple[int, ...]]:
    """One cycle of orders of ``n`` groups (indices), the first the groups' own order.

    Even ``n``: ``n`` orders, each ordered pair adjacent once. Odd ``n``: ``2n`` orders (the
    rows and their reverses), each ordered pair adjacent twice. With two groups no order
    avoids a repeat at a boundary: AB, BA (each group repeats once a cycle, alike)."""
    if n < 1:
        raise ValueError(f"n must be at least 1, got {n}")
    if n == 1:
        return [(0,)]
    # the Williams first row 0, 1, n-1, 2, n-2, ...; row i adds i to every entry (mod n)
    first = [0]
    low, high = 1, n - 1
    while len(first) < n:
        first.append(low)
        low += 1
        if len(first) < n:
            first.append(high)
            high -= 1
    rows = [tuple((x + i) % n for x in first) for i in range(n)]
    if n % 2:
        rows += [row[::-1] for row in rows]
    # relabel so the first row is 0, 1, ..., n-1: the balance is the same under any labels
    label = {symbol: position for position, symbol in enumerate(first)}
    rows = [tuple(label[x] for x in row) for row in rows]
    return _no_repeats_at_boundaries(rows)


def _no_repeats_at_boundaries(rows: list[tuple[int, ...]]) -> list[tuple[int, ...]]:
    """``rows`` in a sequence, starting with the first, in which no row begins with the group
    the row before it ended with (the last wrapping around to the first); two groups
    cannot avoid it (AB, BA), so their rows stay as they are."""
    def search(path: list[int]) -> list[int] | None:
        if len(path) == len(rows):
            return path if rows[path[-1]][-1] != rows[path[0]][0] else None
        for i in range(len(rows)):
            if i not in path and rows[i][0] != rows[path[-1]][-1]:
                found = search(path + [i])
                if found is not None:
                    return found
        return None

    if len(rows[0]) < 3:
        return rows
    found = search([0])
    if found is None:  # not met for 3..25 groups; a design that repeats must not pass quietly
        raise ValueError(f"no order of {len(rows)} rows avoids a repeat at the boundaries")
    return [rows[i] for i in found]
