"""What drafting rounds really cost per committed token, against plain rounds of the moment.

``worth_drafting`` (scheduler) predicts from confidences and the cost table; the draft gate
checks the prediction against this measurement. It catches what the prediction misses:
confidences right on average but over-confident exactly where the scheduler picks, a cost
table off by a constant, drafting overhead outside the timed propose call.

Two rules shape it:

- **Tokens, not rounds.** Acceptance is bursty: a round that commits 1 token must not weigh
  as much as one that commits 4. Costs and committed tokens are averaged apart and divided
  (a ratio of means, never a mean of per-round ratios).
- **Paired in time.** The gate keeps one kind of round most of the time and runs the other
  now and then (a probe), so the two kinds' rounds lie minutes apart, and a machine's speed
  drifts by more than the margins compared here (20 % between passes on a shared CPU). Each
  round is therefore priced against the other kind's last ``RECENT`` rounds of its batch
  bucket, when those are fresh (all within the bucket's last ``FRESH`` recorded rounds): a
  probe against the rounds just before it. Running means over each kind alone compared a
  drafting probe from a slow minute with plain rounds of a fast one: a bench cell at c=32
  drafted on a measured "win" that cost 4 % more per token.

Costs are in units of the cost table's plain time per token at the round's batch size, so
batches of different sizes in one bucket compare. Pure: the engine hands it numbers.
"""

from __future__ import annotations

import math
from collections import deque


class _Paired:
    """Running means of one kind's rounds priced against the other kind's recent level."""

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


class DraftOutcomes:
    RECENT = 4  # the other kind's level: the mean over its last 4 rounds of the bucket ...
    FRESH = 16  # ... when all of them lie within the bucket's last 16 recorded rounds

    def __init__(self, ema: float = 0.05, min_rounds: int = 8) -> None:
        self.ema = ema
        self.min_rounds = min_rounds
        self._count: dict[tuple[int, bool], int] = {}
        self._index: dict[int, int] = {}  # rounds recorded per bucket
        # per (bucket, kind): its last RECENT rounds as (index, cost, committed)
        self._recent: dict[tuple[int, bool], deque[tuple[int, float, int]]] = {}
        self._paired: dict[tuple[int, bool], _Paired] = {}

    def record(self, bucket: int, drafted: bool, seconds: float, committed: int,
               plain_seconds_per_token: float) -> None:
        if committed <= 0 or seconds <= 0 or plain_seconds_per_token <= 0:
            return
        key = (bucket, drafted)
        index = self._index[bucket] = self._index.get(bucket, 0) + 1
        cost = seconds / plain_seconds_per_token
        level = self._level(bucket, not drafted, index)
        if level is not None:
            self._paired.setdefault(key, _Paired()).add(cost / level, committed, self.ema)
        self._recent.setdefault(key, deque(maxlen=self.RECENT)).append((index, cost, committed))
        self._count[key] = self._count.get(key, 0) + 1

    def _level(self, bucket: int, drafted: bool, now: int) -> float | None:
        """Cost per committed token of this kind's last rounds, if they are fresh."""
        recent = self._recent.get((bucket, drafted))
        if not recent or now - recent[0][0] > self.FRESH:
            return None
        return sum(c for _, c, _ in recent) / sum(t for _, _, t in recent)

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
