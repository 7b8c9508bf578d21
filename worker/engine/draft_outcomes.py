"""What drafting rounds really cost per committed token, against plain rounds of the moment.

``worth_drafting`` (scheduler) predicts from confidences and the cost table; the draft gate
checks the prediction against this measurement. It catches what the prediction misses:
confidences right on average but over-confident exactly where the scheduler picks, a cost
table off by a constant, drafting overhead outside the timed propose call.

Two rules shape it:

- **Tokens, not rounds.** Acceptance is bursty: a round that commits 1 token must not weigh
  as much as one that commits 4. Costs and committed tokens are averaged apart and divided
  (a ratio of means, never a mean of per-round ratios).
- **Paired in time, on both sides.** The gate keeps one kind of round most of the time and
  runs the other now and then (a probe), so the two kinds' rounds lie minutes apart, and a
  machine's speed drifts by more than the margins compared here (20 % between passes on a
  shared CPU). Each round is therefore priced against the other kind's ``SIDE`` rounds of its
  batch bucket just before it and its ``SIDE`` just after, all within ``FRESH`` recorded
  rounds of it and none across an idle spell (``pause``): a probe against the rounds around
  it, priced once those after it have run.
  Running means over each kind alone compared a drafting probe from a slow minute with plain
  rounds of a fast one: a bench cell at c=32 drafted on a measured "win" that cost 4 % more
  per token. Pricing against the rounds before only reads a trend as a difference: rounds
  that slow down (bfloat16 rounds of 32 rows went from 61 to 110 ms over a bench cell's
  first 40 rounds) make the probe look dearer than the incumbent kind, by the slope times the
  lag (``tests/engine/test_draft_outcomes.py``: 2.5-3.5 % on a simulated engine slowing so,
  within 0.4 % priced on both sides).

Costs are in units of the cost table's plain time per token at the round's batch size, so
batches of different sizes in one bucket compare. Pure: the engine hands it numbers.
"""

from __future__ import annotations

import math
from collections import deque
from dataclasses import dataclass


class _Paired:
    """Running means of one kind's rounds priced against the other kind's level around them."""

    def __init__(self) -> None:
        self.cost = 0.0  # round cost over the other kind's cost per token, at the time
        self.tokens = 0.0  # tokens the round committed
        self.n = 0

    def add(self, relative_cost: float, committed: int, ema: float) -> None:
        self.n += 1
        rate = max(1.0 / self.n, ema)  # plain average over the first rounds, then forgetting
        self.cost += rate * (relative_cost - self.cost)
        self.tokens += rate * (committed - self.tokens)

    def ratio(self) -> float:
        """This kind's cost per token over the other kind's (1.0: the same)."""
        return self.cost / self.tokens


@dataclass
class _Pending:
    """A round waiting for the other kind's rounds after it."""

    index: int
    drafted: bool
    cost: float
    committed: int
    around: list[tuple[int, float, int]]  # the other kind's rounds: (index, cost, committed)


class DraftOutcomes:
    SIDE = 2  # the other kind's level: its 2 rounds of the bucket before a round, 2 after ...
    FRESH = 16  # ... each within 16 recorded rounds of it

    def __init__(self, ema: float = 0.05, min_rounds: int = 8) -> None:
        self.ema = ema
        self.min_rounds = min_rounds
        self._count: dict[tuple[int, bool], int] = {}
        self._index: dict[int, int] = {}  # rounds recorded per bucket
        # per (bucket, kind): its last SIDE rounds as (index, cost, committed)
        self._recent: dict[tuple[int, bool], deque[tuple[int, float, int]]] = {}
        self._pending: dict[int, list[_Pending]] = {}  # per bucket
        self._paired: dict[tuple[int, bool], _Paired] = {}

    def record(self, bucket: int, drafted: bool, seconds: float, committed: int,
               plain_seconds_per_token: float) -> None:
        if committed <= 0 or seconds <= 0 or plain_seconds_per_token <= 0:
            return
        key = (bucket, drafted)
        index = self._index[bucket] = self._index.get(bucket, 0) + 1
        cost = seconds / plain_seconds_per_token
        self._settle(bucket, (index, cost, committed), drafted)
        before = self._recent.get((bucket, not drafted), ())
        if len(before) == self.SIDE and index - before[0][0] <= self.FRESH:
            self._pending.setdefault(bucket, []).append(
                _Pending(index, drafted, cost, committed, list(before)))
        self._recent.setdefault(key, deque(maxlen=self.SIDE)).append((index, cost, committed))
        self._count[key] = self._count.get(key, 0) + 1

    def pause(self) -> None:
        """The engine went idle: rounds on the two sides of an idle spell lie apart in time
        however few rounds apart (a bench cell's engine stops and starts; a server's
        traffic pauses), so none prices another across it. What was measured stays."""
        self._recent.clear()
        self._pending.clear()

    def _settle(self, bucket: int, new: tuple[int, float, int], drafted: bool) -> None:
        """The new round follows the pending rounds of the other kind: those it completes
        are priced; those it leaves stale are dropped (not evidence)."""
        kept = []
        for p in self._pending.get(bucket, []):
            if new[0] - p.index > self.FRESH:
                continue
            if p.drafted != drafted:
                p.around.append(new)
                if len(p.around) == 2 * self.SIDE:
                    level = sum(c for _, c, _ in p.around) / sum(t for _, _, t in p.around)
                    self._paired.setdefault((bucket, p.drafted), _Paired()).add(
                        p.cost / level, p.committed, self.ema)
                    continue
            kept.append(p)
        self._pending[bucket] = kept
    def count(self, bucket: int, drafted: bool) -> int:
        """Rounds of this kind recorded in the bucket."""
        return self._count.get((bucket, drafted), 0)

    def pairs(self, bucket: int) -> int:
        """Rounds of the bucket priced against fresh rounds of the other kind."""
        return sum(p.n for (b, _), p in self._paired.items() if b == bucket)

    def cost_ratio(self, bucket: int) -> float | None:
        """Drafting rounds' cost per committed token over plain rounds' (None: no pair yet).

        Drafting rounds priced against plain ones give it directly, plain rounds priced
        against drafting ones its inverse; where both kinds have pairs (while the gate
        learns, or flips), the two are averaged in log space, weighted by how many rounds
        each holds (up to what the running means remember)."""
        weighted, weights = 0.0, 0.0
        for drafted, sign in ((True, 1.0), (False, -1.0)):
            p = self._paired.get((bucket, drafted))
            if p is None:
                continue
            w = min(p.n, 1.0 / self.ema)
            weighted += w * sign * math.log(p.ratio())
            weights += w
        return math.exp(weighted / weights) if weights else None

    def measured_ratio(self, bucket: int) -> float | None:
        """``cost_ratio`` once both kinds were seen ``min_rounds`` times and as many rounds
        were paired, else None (not evidence yet)."""
        if (min(self.count(bucket, True), self.count(bucket, False)) < self.min_rounds
                or self.pairs(bucket) < self.min_rounds):
            return None
        return self.cost_ratio(bucket)

    def drafting_wins(self, bucket: int, margin: float = 0.0) -> bool | None:
        """True/False once measured (``measured_ratio``), else None. ``margin``: True only
        below (1 - margin) x plain per token."""
        ratio = self.measured_ratio(bucket)
        return None if ratio is None else ratio < 1.0 - margin
