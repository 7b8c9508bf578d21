"""Verification scheduling: how many drafted tokens each request sends to the target.

Pure functions over small arrays (no torch, no engine state), one call per round:

- ``plain``: verify nothing (plain decoding).
- ``fixed``: every request verifies min(fixed_length, drafted) (Scheme A).
- ``scheduled`` (Scheme B): calibrated confidences c(r, j) give prefix survival
  S(r, i) = prod_{j<=i} c(r, j), the expected number of accepted drafts of request r when it
  verifies i tokens is sum_{j<=i} S(r, j). With T base tokens in the forward (one pending token
  per decoding request plus any prefill chunk) and a measured, monotone step-cost table, the
  global budget is B* = argmax_B [N + sum of the top-B survivals] / (cost(T + B) + O):
  expected committed tokens per second of round time, O being what the round costs besides
  the target forward (drafting, already spent when the schedule is made; 0 by default).
  Survivals are non-increasing along a request's positions, so the top-B set is a contiguous
  prefix of every request (ties broken by position). Bounds: per-request min_verify (always verified, if drafted) and max_verify,
  survival_floor, and max_batch_tokens on T + B.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace

import numpy as np

from specd.api.policy import Calibration, Policy


@dataclass(frozen=True)
class CostTable:
    """Target forward time (seconds) against batched token count, non-decreasing.

    ``pad_to[n - 1]`` is the token count a forward of n tokens should really run with, for the
    dense start of the grid (1, 2, 3, ... measured one by one). CPU GEMM kernels are not
    monotone in the row count: on the 2-core dev machine a 3-token forward of SmolLM2 took
    ~1.5x a 4-token one (MKL runs tiny M as repeated matrix-vector products, each streaming the
    weights again). Padding such a forward up to the cheaper size makes the monotone table
    true instead of optimistic; the runner applies it (``LlamaRunner.set_padding``; a lone
    row by the one-row table's own ``pad_to``, ``one_row_pad_to``).

    The table is measured with one token per row (a busy batch's shape) and prices any
    round. ``by_rows``, when measured, holds tables for rounds of a given number of rows (R
    requests, each verifying its own draft): per-row work (attention over each row's
    context) makes the shape matter: R rows of several tokens cost less than R x several
    rows of one, on the dev CPU 0.96x (float32) and 0.78x (bfloat16) for 4 tokens in one row
    against 4 rows of one, and 0.94x / 0.55x for 4 rows of 4 against 16 rows of 1. Priced
    as rows of one, drafts that cost almost nothing to verify were cut. ``for_rows(R)``
    returns the table measured with the fewest rows >= R (more rows only add cost, so the
    price errs high), or this one.
    """

    tokens: tuple[int, ...]
    seconds: tuple[float, ...]
    pad_to: tuple[int, ...] = ()
    by_rows: tuple[tuple[int, CostTable], ...] = ()  # (rows, table), rows ascending

    # a forward is padded only to a size measured this much cheaper: a padded forward does
    # work it does not need, so a saving within the spread of start-up timings is not taken
    # for one (the steps padding exists for, tiny-M GEMM kernels, are 12-50 %)
    PAD_MARGIN = 0.03
    # a lone row pads only past this: on the Xeon of docs/bench/RESULTS.md one row of 7-11
    # tokens times up to 5 % dearer than one of 4 and one of 17 1-4 % cheaper (medians of
    # 15), below what best-of-3 start-up timings resolve: they padded a 4-token verify to
    # 5-11 tokens, which ran 3-5 % slower; the EPYC's lone-row step (3 tokens 1.12x its 4)
    # still pads
    ONE_ROW_PAD_MARGIN = 0.10

    def one_row_pad_to(self) -> tuple[int, ...]:
        """``pad_to`` for a forward of one row: the one-row table's, when measured (the main
        table's small sizes are as many one-token rows: on the EPYC the lone row's 3 tokens
        cost 1.12x its 4, a step the main table does not have); () when not measured (the
        runner then pads a lone row by ``pad_to``)."""
        return next((table.pad_to for r, table in self.by_rows if r == 1), ())

    def for_rows(self, rows: int) -> CostTable:
        """The table for a forward over ``rows`` request rows."""
        return next((table for r, table in self.by_rows if r >= rows), self)

    @staticmethod
    def from_measurements(tokens: Sequence[int], seconds: Sequence[float],
                          margin: float = PAD_MARGIN) -> CostTable:
        """Sort by token count and make monotone: each point is lowered to the minimum of
        itself and every later point (suffix minimum). Where the grid is dense (1, 2, 3, ...)
        that minimum is reached by padding the forward to the cheaper size (``pad_to``) when
        it is cheaper by more than ``margin``; within the margin, and beyond the dense
        part, a point above a later one is taken as timing noise (interference only ever
        adds time)."""
        if not tokens or len(tokens) != len(seconds):
            raise ValueError("need equally many (>= 1) token counts and timings")
        pairs = sorted(zip(tokens, seconds, strict=True))
        ts = [int(t) for t, _ in pairs]
        if ts[0] < 1 or len(set(ts)) != len(ts):
            raise ValueError("token counts must be distinct and >= 1")
        raw = np.array([s for _, s in pairs], dtype=float)
        secs = np.minimum.accumulate(raw[::-1])[::-1]
        if secs[0] <= 0:
            raise ValueError("timings must be positive")
        dense = 0
        while dense < len(ts) and ts[dense] == dense + 1:
            dense += 1
        pad_to = []
        for i in range(dense):
            cheapest = i + int(np.argmin(raw[i:dense]))
            saves = CostTable._pad_saves(raw[cheapest], raw[i], margin)
            pad_to.append(ts[cheapest] if saves else ts[i])
        return CostTable(tuple(ts), tuple(float(s) for s in secs), tuple(pad_to))

    def with_confirmed_padding(self, seconds: Mapping[int, float],
                               margin: float = PAD_MARGIN) -> CostTable:
        """Keep a pad (n tokens run as m) only where ``seconds``, timings taken after the
        choice, find m cheaper than n by more than ``margin`` too. The choice took m as
        the least of many noisy timings, so it overstates m's saving (the winner's curse):
        on the Xeon of the benchmarks, start-up runs of one engine padded a lone 4-token
        verify to 5, 6, 7 or 17 tokens, and at one request Scheme B read 0.95-0.97x fixed
        verification where it padded to 5-7 (fixed to 4 or 17), 1.03x where only it padded to 17.
        Unconfirmed, n runs as itself."""
        pad = tuple(m if m == n or self._pad_saves(seconds.get(m, math.inf), seconds.get(n, 0.0),
                                                   margin)
                    else n for n, m in zip(self.tokens, self.pad_to, strict=False))
        return replace(self, pad_to=pad)

    @staticmethod
    def _pad_saves(padded: float, own: float, margin: float) -> bool:
        """Whether a forward padded up to a size timed ``padded`` saves on its own size's
        ``own``: by more than ``margin`` (the one rule for choosing and confirming)."""
        return bool(padded < (1 - margin) * own)

    @staticmethod
    def flat() -> CostTable:
        """Every forward costs the same: verify everything the bounds allow."""
        return CostTable((1,), (1.0,))

    def cost(self, tokens: int | np.ndarray) -> np.ndarray:
        """Piecewise-linear interpolation; beyond the grid, the last segment's slope."""
        t = np.asarray(tokens, dtype=float)
        xs = np.array(self.tokens, dtype=float)
        ys = np.array(self.seconds, dtype=float)
        out = np.interp(t, xs, ys)
        if len(xs) >= 2:
            slope = max((ys[-1] - ys[-2]) / (xs[-1] - xs[-2]), 0.0)
            out = np.where(t > xs[-1], ys[-1] + slope * (t - xs[-1]), out)
        return out


def calibrate(conf: Sequence[float], calibration: Calibration) -> list[float]:
    """Policy-level correction c' = sigmoid(logit(c) / T_i + b_i) (identity when empty)."""
    if not calibration.temperature and not calibration.bias:
        return [min(max(float(c), 0.0), 1.0) for c in conf]
    out = []
    for i, c in enumerate(conf):
        c = min(max(float(c), 1e-6), 1 - 1e-6)
        temp = _at(calibration.temperature, i, 1.0)
        bias = _at(calibration.bias, i, 0.0)
        z = math.log(c / (1 - c)) / temp + bias
        out.append(1.0 / (1.0 + math.exp(-z)))
    return out


def _at(values: Sequence[float], i: int, default: float) -> float:
    if not values:
        return default
    return float(values[min(i, len(values) - 1)])


def survival(conf: Sequence[float]) -> np.ndarray:
    """S(i) = prod_{j<=i} c(j) for i = 1..len(conf)."""
    return np.cumprod(np.clip(np.asarray(conf, dtype=float), 0.0, 1.0))


@dataclass(frozen=True)
class Schedule:
    lengths: list[int]  # verified tokens per request
    expected_tokens: float  # N + sum of verified survivals
    cost: float  # cost(T + B) from the table


def schedule(policy: Policy, confidences: Sequence[Sequence[float]], base_tokens: int,
             costs: CostTable, overhead: float = 0.0,
             rows: Sequence[Policy] | None = None) -> Schedule:
    """Verify lengths for every decoding request (``confidences[r]`` has one entry per draft).

    ``rows``: each request's own policy (its task group's, ``Policy.for_group``), else
    ``policy`` for all; ``policy`` sets what the batch shares (``max_batch_tokens``). Plain
    rows verify nothing, fixed rows their fixed length, and scheduled rows share the budget
    left: the rate maximised counts every row's expected tokens over the whole forward.

    ``overhead``: seconds of the round outside the target forward, whatever is verified (the
    drafting that already ran). The rate to maximise is per second of the whole round: left
    out, a lone request's round (a 19 ms forward plus 2-3 ms of drafting on the dev CPU) had
    its tail cut wherever the forward's step from 2 to 4 tokens (+9 %) outweighed it, though
    that step is a smaller share of the round."""
    n = len(confidences)
    per_row = list(rows) if rows is not None else [policy] * n
    if len(per_row) != n:
        raise ValueError("need one policy per request")
    room = max(policy.max_batch_tokens - base_tokens, 0)
    lengths = [0] * n
    fixed = [r for r in range(n) if per_row[r].mode == "fixed"]
    fitted = _fit_uniform([min(per_row[r].fixed_length, len(confidences[r])) for r in fixed], room)
    for r, v in zip(fixed, fitted, strict=True):
        lengths[r] = v
    expected = n + sum(float(survival(confidences[r])[:lengths[r]].sum()) for r in fixed)
    used = sum(fitted)
    scheduled = [r for r in range(n) if per_row[r].mode == "scheduled"]
    if not scheduled:
        return Schedule(lengths, expected, float(costs.cost(base_tokens + used)))
    sub = _scheduled([per_row[r] for r in scheduled], [confidences[r] for r in scheduled],
                     base_tokens + used, costs, room - used, overhead, expected)
    for r, v in zip(scheduled, sub.lengths, strict=True):
        lengths[r] = v
    return Schedule(lengths, sub.expected_tokens, sub.cost)


def _fit_uniform(lengths: list[int], room: int) -> list[int]:
    """Shorten the longest lengths first until they fit the token budget."""
    lengths = list(lengths)
    while sum(lengths) > room:
        i = max(range(len(lengths)), key=lambda j: lengths[j])
        lengths[i] -= 1
    return lengths


def _scheduled(policies: Sequence[Policy], confidences: Sequence[Sequence[float]],
               base_tokens: int, costs: CostTable, room: int, overhead: float,
               expected_base: float) -> Schedule:
    """The scheduled rows' lengths; ``expected_base``: the tokens the round commits whatever
    these rows verify (one per request of the batch, plus the fixed rows' expected drafts)."""
    n = len(confidences)
    forced = [0] * n
    forced_surv = 0.0
    cand_s: list[float] = []
    cand_r: list[int] = []
    cand_i: list[int] = []
    for r, (policy, conf) in enumerate(zip(policies, confidences, strict=True)):
        s = survival(calibrate(conf, policy.calibration))
        cap = min(len(s), policy.max_verify, policy.k_max)
        f = min(policy.min_verify, cap)
        forced[r] = f
        forced_surv += float(s[:f].sum())
        for i in range(f, cap):
            if s[i] < policy.survival_floor:
                break  # survival is non-increasing: the rest is below the floor too
            cand_s.append(float(s[i]))
            cand_r.append(r)
            cand_i.append(i)
    # min_verify beats the token budget only as far as the budget allows
    forced = _fit_uniform(forced, room)
    base = base_tokens + sum(forced)
    room_left = max(room - sum(forced), 0)
    order = sorted(range(len(cand_s)), key=lambda j: (-cand_s[j], cand_i[j], cand_r[j]))
    order = order[:room_left]
    gains = np.concatenate([[0.0], np.cumsum([cand_s[j] for j in order])])
    budgets = np.arange(len(gains))
    value = (expected_base + forced_surv + gains) / (costs.cost(base + budgets)
                                                     + max(overhead, 0.0))
    best = int(np.argmax(value))
    lengths = list(forced)
    for j in order[:best]:
        lengths[cand_r[j]] += 1
    return Schedule(lengths, float(expected_base + forced_surv + gains[best]),
                    float(costs.cost(base + best)))


def worth_drafting(policy: Policy, n: int, mean_conf: Sequence[float], base_tokens: int,
                   costs: CostTable, draft_seconds: float,
                   rows: Sequence[Policy] | None = None) -> bool:
    """Scheduled mode, before drafting: would a speculative round beat a plain round?

    Uses the drafter's running mean confidence per position for every request and the
    measured drafting time: expected tokens per second of (verify + draft) time against
    n / cost(T) for a plain round. When the batch is so busy that the scheduler would verify
    (almost) nothing, skipping the drafter keeps scheduled verification from losing to plain.
    ``rows``: the n requests' own policies (``schedule``).
    """
    if n == 0 or not mean_conf:
        return False
    sched = schedule(policy, [list(mean_conf)] * n, base_tokens, costs, draft_seconds, rows)
    if sum(sched.lengths) == 0:
        return False
    speculative = sched.expected_tokens / (sched.cost + draft_seconds)
    plain = n / float(costs.cost(base_tokens))
    return speculative > plain


class OnlineCalibration:
    """Per-position correction of the drafter's confidences from the engine's own outcomes.

    A drafter calibrated offline on teacher-forced positions is over-confident in serving:
    rounds start right after a rejection, where drafting is harder. For each position i this
    keeps (reached, accepted, sum of predicted confidence) over verified positions whose
    earlier drafts were all accepted, and scales confidences by observed / predicted
    acceptance (smoothed with ``prior`` pseudo-counts; old evidence halves past ``window``).
    """

    def __init__(self, prior: float = 20.0, window: int = 2000) -> None:
        self.prior = prior
        self.window = window
        self.reached: list[float] = []
        self.accepted: list[float] = []
        self.predicted: list[float] = []

    def factor(self, i: int) -> float:
        if i >= len(self.reached):
            return 1.0
        return (self.accepted[i] + self.prior) / (self.predicted[i] + self.prior)

    def apply(self, conf: Sequence[float]) -> list[float]:
        return [min(1.0, max(0.0, c * self.factor(i))) for i, c in enumerate(conf)]

    def update(self, conf: Sequence[float], verified: int, accepted: int) -> None:
        """One request-round: raw confidences, how many were verified and accepted."""
        for i in range(min(accepted + 1, verified)):
            while i >= len(self.reached):
                self.reached.append(0.0)
                self.accepted.append(0.0)
                self.predicted.append(0.0)
            self.reached[i] += 1
            self.accepted[i] += 1.0 if i < accepted else 0.0
            self.predicted[i] += min(max(float(conf[i]), 0.0), 1.0)
            if self.reached[i] > self.window:
                self.reached[i] /= 2
                self.accepted[i] /= 2
                self.predicted[i] /= 2
