"""The order the groups of a bench run take each slice in: a balanced (Williams) design.

Alternating the order from slice to slice (ABCD, DCBA, ABCD, ...) put every group in every
position, but made the two end groups run twice in a row across each slice boundary (D then
D, A then A) and the middle ones never. In issue 26's loaded runs the group listed in the
middle read a few percent below the plain twin listed at the end, and above it once the
order was turned: where a group sat moved its ratio. A Williams design removes that
asymmetry: over one cycle of orders every group takes every position equally often and
follows every other group equally often, and from three groups up no group runs twice in a
row, across slice boundaries included (the cycle wraps around). A run whose slices number a
multiple of the cycle is balanced exactly; a shorter one still never repeats a group."""

from __future__ import annotations


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
    the row before it ended with (the last wrapping around to the first); ``rows`` unchanged
    where none exists (one or two groups)."""
    def search(path: list[int]) -> list[int] | None:
        if len(path) == len(rows):
            return path if rows[path[-1]][-1] != rows[path[0]][0] else None
        for i in range(len(rows)):
            if i not in path and rows[i][0] != rows[path[-1]][-1]:
                found = search(path + [i])
                if found is not None:
                    return found
        return None

    found = search([0])
    return rows if found is None else [rows[i] for i in found]
