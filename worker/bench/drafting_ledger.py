"""What an engine's drafting rounds cost against its own plain rounds of the same moment.

Two groups' tokens/s, even slice by slice, differ by how fast the machine ran while each took
its turn: on a shared 2-core VM, plain decoding's own passes at C=32 spread by 15 % in one
run, wider than any margin asked of Scheme B. A scheduled group's
engine, though, runs plain rounds and drafting rounds side by side, a fraction of a second
apart. Each drafting round is priced here against the same engine's plain rounds of the same
shape (as many decoding rows, no prefill chunk in the forward) nearest to it in round order,
per committed token: what the round took beyond what plain rounds would have taken for the
tokens it committed. Summed over the drafting rounds and set against the engine's whole round
time, it is what the group's drafting decisions cost (positive) or saved (negative) against
never drafting, free of the drift between groups.

It leaves out what a scheduled engine pays in the rounds it does not draft (the gate, the
hidden states the drafter reads): ``specd bench rounds`` compares those rounds with plain
decoding's, interleaved round by round. Drafting rounds with no plain round of their shape in
the run (a prefill chunk beside them, or a batch size that never ran plain) are counted, not
priced.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence
from dataclasses import dataclass

NEIGHBOURS = 8  # plain rounds a drafting round is priced against (the nearest in order)


@dataclass(frozen=True)
class Round:
    rows: int  # decoding requests
    drafted: bool  # the drafter ran
    seconds: float
    committed: int  # tokens the round committed
    clean: bool  # no prefill chunk in the forward


@dataclass(frozen=True)
class Ledger:
    seconds: float = 0.0  # every round's time
    drafted: int = 0  # drafting rounds
    priced: int = 0  # drafting rounds with plain rounds of their shape to compare
    excess_seconds: float = 0.0  # over the priced ones: time beyond plain rounds' per token

    def __add__(self, other: Ledger) -> Ledger:
        return Ledger(self.seconds + other.seconds, self.drafted + other.drafted,
                      self.priced + other.priced, self.excess_seconds + other.excess_seconds)

    def excess_share(self) -> float | None:
        """Drafting's cost over the whole round time (negative: it saved); None when no
        drafting round could be priced."""
        return self.excess_seconds / self.seconds if self.priced and self.seconds else None


def drafting_ledger(rounds: Sequence[Round], neighbours: int = NEIGHBOURS) -> Ledger:
    """``rounds`` in the order they ran."""
    plain: dict[int, list[int]] = {}  # rows -> indices of clean plain rounds
    for i, r in enumerate(rounds):
        if r.clean and not r.drafted and r.committed > 0:
            plain.setdefault(r.rows, []).append(i)
    drafted = priced = 0
    excess = 0.0
    for i, r in enumerate(rounds):
        if not r.drafted:
            continue
        drafted += 1
        near = _nearest(plain.get(r.rows, []), i, neighbours) if r.clean else []
        if not near:
            continue
        per_token = (sum(rounds[j].seconds for j in near)
                     / sum(rounds[j].committed for j in near))
        excess += r.seconds - per_token * r.committed
        priced += 1
    return Ledger(sum(r.seconds for r in rounds), drafted, priced, excess)


def _nearest(indices: list[int], at: int, count: int) -> list[int]:
    """The ``count`` entries of sorted ``indices`` nearest to ``at``."""
    lo = hi = bisect.bisect_left(indices, at)
    out: list[int] = []
    while len(out) < count and (lo > 0 or hi < len(indices)):
        if hi >= len(indices) or (lo > 0 and at - indices[lo - 1] <= indices[hi] - at):
            lo -= 1
            out.append(indices[lo])
        else:
            out.append(indices[hi])
            hi += 1
    return out
