"""The draft gate (scheduled mode): does this round run the drafter at all?

    gate = DraftGate(costs)
    choice = gate.choose(batch_policy, policies, base_tokens, rows, measured)  # before drafting
    gate.learn(n, confidences, draft_seconds)          # after a round that drafted
    gate.record(RoundOutcome(n, drafted, seconds, committed, verified))  # after a round of one kind
    gate.idle()                                        # the engine has nothing to run

When the scheduler would verify (almost) nothing, drafting is pure loss: a round that skips
the drafter is a plain round. The gate decides from two sources:

- a **prediction** (``scheduler.worth_drafting``): the drafter's running mean confidence per
  position and its running mean time per round (per batch-size bucket), priced with the cost
  table; cached until the drafter's statistics change;
- the **measurement** (``DraftOutcomes``): what drafting and plain rounds of this batch size
  really cost per committed token, each round priced against the other kind's rounds just
  before and after it (a machine's speed drifts between probes); once both kinds were seen, it
  decides, and drafting must win clearly: by ``WIN_MARGIN`` a committed token. A measured
  win overrules a predicted loss (a start-up table that overpriced a lone row's verify kept
  a lone request plain at 1.05x plain decoding where fixed-length drafting made 1.36x), and a
  measured break-even or loss overrules a predicted gain (near break-even the measurement
  lags a drift it cannot see between probes: a bf16 batch of 16 kept drafting on a measured
  0.95-1.00 while its drafting rounds cost 7-20 % more a token than its plain ones). A win
  counts only if the bucket's last ``min_rounds`` drafting rounds verified a draft between
  them: rounds whose schedule verified none committed one token a row, as plain rounds do,
  after drafting, so they cannot win. Rejected drafts are not that case: their cost is the
  drafter's real one, which the measurement prices (a guard on drafts *kept* read a lone
  request's run of 8 rejected rounds as no gain and left it plain for hundreds of rounds,
  0.90x fixed-length drafting).

**Exploration has a stated bound.** A decision that holds would never measure the other
choice again, so now and then the other choice runs once (a probe). Each situation
(decision, batch bucket) keeps its own interval (with newcomers' prefills coming and going the
decision flips often, and one shared interval kept falling back to the shortest). Until the
other choice has been measured often enough to be compared (``DraftOutcomes.min_rounds``),
the two choices alternate (``PROBE_LEARN``): the comparison needs ``min_rounds`` of each
whichever was predicted, so a right prediction costs ``min_rounds`` probes and a wrong one
(a start-up cost table read on a busy machine) ``min_rounds`` rounds of the wrong choice
before the measurement overrules it (probing every fifth round, four times as many). After
that the interval starts at ``PROBE_EVERY`` and doubles each time the decision still holds,
up to ``PROBE_MAX``: probes are at most 1 / (PROBE_EVERY + 1) of a situation's rounds, and their
share falls towards 1 / (PROBE_MAX + 1) while the other choice keeps losing
(``probe_share_bound``). Probes run only in rounds whose outcome is recorded (``measured``:
no prefill chunk in the batch), so every probe pays for a measurement.

Pure: no torch, no engine, no clock; the engine hands it numbers.
"""

from __future__ import annotations

from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

from specd.api.policy import Policy
from specd.worker.engine.draft_outcomes import DraftOutcomes
from specd.worker.engine.scheduler import CostTable, worth_drafting


def bucket(n: int) -> int:
    """Batch-size bucket: 1, 2, 4, 8, ... (the ``batch`` label of the decode metrics)."""
    return 1 << max(n - 1, 0).bit_length()


@dataclass(frozen=True)
class RoundOutcome:
    """One round of a single kind (every decoding row scheduled, no prefill chunk)."""

    rows: int  # decoding requests in the round
    drafted: bool  # the drafter ran
    seconds: float  # the whole round's time
    committed: int  # tokens the round committed
    verified: int  # drafted tokens its forward verified (0 in a plain round)


@dataclass(frozen=True)
class Choice:
    draft: bool
    probe: bool = False  # the other choice than the decision, to keep it measured
    why: str = ""


class DraftGate:
    # until the other choice is measured min_rounds times: every other round (probing
    # every 5th let a wrong prediction draft 32 full-batch rounds at c=32 first)
    PROBE_LEARN = 1
    PROBE_EVERY = 16
    PROBE_MAX = 256
    EMA = 0.1  # running means of confidence and drafting time
    # once measured, drafting must save this share of a committed token's cost: near
    # break-even a round stays exactly a plain round
    WIN_MARGIN = 0.05

    def __init__(self, costs: CostTable, outcomes: DraftOutcomes | None = None) -> None:
        self.costs = costs
        self.outcomes = outcomes or DraftOutcomes()
        self.conf_mean: list[float] = []  # running mean (calibrated) confidence per position
        self.draft_seconds: dict[int, float] = {}  # running mean drafting time per bucket
        # per situation (decision, bucket): [rounds since its last probe, current interval]
        self._probes: dict[tuple[bool, int], list[int]] = {}
        self._predicted: dict[tuple[int, int, tuple[int, ...]], bool] = {}
        # per bucket: drafted tokens the last drafting rounds verified
        self._verified: dict[int, deque[int]] = {}

    @classmethod
    def probe_share_bound(cls) -> tuple[float, float]:
        """(at most, in the long run): the share of a situation's rounds that are probes,
        once the other choice is measured (before that: at most ``min_rounds`` probes)."""
        return 1.0 / (cls.PROBE_EVERY + 1), 1.0 / (cls.PROBE_MAX + 1)

    def max_probes(self, rounds: int) -> int:
        """At most this many probes in ``rounds`` rounds of one situation."""
        return self.outcomes.min_rounds + rounds // (self.PROBE_EVERY + 1) + 1

    def forget_predictions(self) -> None:
        """The policy changed: predictions priced with the old one are void."""
        self._predicted.clear()

    def predict(self, batch_policy: Policy, policies: Sequence[Policy], base_tokens: int,
                rows: int) -> bool | None:
        """What the confidences and the cost table say (None: nothing learnt yet)."""
        n = len(policies)
        draft_s = self.draft_seconds.get(bucket(n))
        if not self.conf_mean or draft_s is None:
            return None
        key = (base_tokens, rows, tuple(sorted(id(p) for p in policies)))
        want = self._predicted.get(key)
        if want is None:  # the prediction only changes when the drafter's statistics do
            want = worth_drafting(batch_policy, n, self.conf_mean, base_tokens,
                                  self.costs.for_rows(rows), draft_s, rows=policies)
            self._predicted[key] = want
        return want

    def choose(self, batch_policy: Policy, policies: Sequence[Policy], base_tokens: int,
               rows: int, measured: bool) -> Choice:
        """``policies``: the scheduled requests' own (their groups'); the other rows of a
        mixed batch are left out of the comparison, so it is exact for batches of one kind.
        ``rows``: every row of the forward (decoding requests and prefill chunks)."""
        if not policies:
            return Choice(False, why="no scheduled request")
        b = bucket(len(policies))
        ratio = self.outcomes.measured_ratio(b)  # None: not measured enough to compare
        if ratio is None:  # only then the prediction decides: once measured it is not
            # computed (a schedule over the batch, priced anew after every ``learn``)
            predicted = self.predict(batch_policy, policies, base_tokens, rows)
            if predicted is None:
                return Choice(True, why="nothing learnt yet: draft and learn")
            want, why = predicted, "predicted gain" if predicted else "predicted no gain"
        elif ratio >= 1.0:
            want, why = False, "measured: drafting rounds cost more per token"
        elif not any(self._verified.get(b, ())):
            # rounds that verified no draft committed what plain rounds do, after drafting:
            # a measured win there is the machine's noise (a batch of one read 143 drafted
            # tokens, none verified, on one such "win")
            want, why = False, "measured: drafting rounds verified no draft"
        elif ratio < 1.0 - self.WIN_MARGIN:
            want, why = True, "measured: drafting rounds cost less per token"
        else:  # a win by less than the margin
            want, why = False, "measured: drafting rounds save too little per token"
        if not measured:
            return Choice(want, why=why)
        probe = self._probes.setdefault((want, b), [0, self.PROBE_EVERY])
        # until the other choice is measured, a wrong prediction stands for as long as the
        # measurement that would overrule it takes: probe often, and do not back off
        learning = self.outcomes.count(b, not want) < self.outcomes.min_rounds
        if probe[0] >= (self.PROBE_LEARN if learning else probe[1]):
            probe[0] = 0
            if not learning:
                probe[1] = min(2 * probe[1], self.PROBE_MAX)
            return Choice(not want, probe=True, why=f"probe ({why})")
        probe[0] += 1
        return Choice(want, why=why)

    def idle(self) -> None:
        """The engine has nothing to run: the measurement pairs no rounds across the gap."""
        self.outcomes.pause()

    def learn(self, n: int, confidences: Sequence[Sequence[float]], seconds: float) -> None:
        """A round drafted for ``n`` requests in ``seconds``: running means of the
        confidence per position and of the drafting time of this bucket."""
        self._predicted.clear()
        b = bucket(n)
        old = self.draft_seconds.get(b)
        self.draft_seconds[b] = seconds if old is None else old + self.EMA * (seconds - old)
        k = max((len(c) for c in confidences), default=0)
        for i in range(k):
            vals = [c[i] for c in confidences if len(c) > i]
            mean = sum(vals) / len(vals)
            if i < len(self.conf_mean):
                self.conf_mean[i] += self.EMA * (mean - self.conf_mean[i])
            else:
                self.conf_mean.append(mean)

    def record(self, outcome: RoundOutcome) -> None:
        """What a round of one kind really cost (compared per bucket, in units of the cost
        table's plain time per token at that batch size)."""
        n = outcome.rows
        if n <= 0:
            return
        if outcome.drafted:
            self._verified.setdefault(bucket(n), deque(maxlen=self.outcomes.min_rounds)).append(
                outcome.verified)
        self.outcomes.record(bucket(n), outcome.drafted, outcome.seconds, outcome.committed,
                             float(self.costs.cost(n)) / n)
