"""Prompt-lookup drafting (no training): find an earlier occurrence of the context's last n
tokens and propose what followed it. Deterministic, so q is one-hot.

Confidence: a match carries no probability of its own, so each request learns one from its
own history. At every call the drafter sees which of its previous proposal's tokens were
committed, and keeps per-position counts (position i reached / accepted); the confidence is
the smoothed per-position acceptance rate (prior ``prior`` with weight ``prior_weight``).
Positions the scheduler did not verify count as reached-and-rejected (slightly pessimistic).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import numpy as np
import torch

from specd.worker.drafters.base import Drafter, DraftRow, Proposal


def lookup(tokens: np.ndarray, k: int, max_n: int = 4, min_n: int = 1) -> list[int]:
    """Up to k tokens following the most recent earlier match of the longest suffix n-gram."""
    return lookup_match(tokens, k, max_n, min_n)[0]


def lookup_match(tokens: np.ndarray, k: int, max_n: int = 4, min_n: int = 1
                 ) -> tuple[list[int], int]:
    """``lookup`` plus the length n of the suffix that matched (0: no match). Longer matches
    are worth more: on the benchmark's prompts a 3-token proposal after a 4-token match had
    2.2 of its tokens accepted on average, after a 1-token match 0.34."""
    length = len(tokens)
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        tail = tokens[length - n:]
        windows = np.lib.stride_tricks.sliding_window_view(tokens[: length - 1], n)
        hits = np.flatnonzero((windows == tail).all(axis=1))
        if hits.size:
            # the latest match that still has k tokens after it, else the earliest match
            full = hits[hits + n + k <= length]
            start = int(full[-1] if full.size else hits[0]) + n
            return tokens[start: start + k].tolist(), n
    return [], 0


@dataclass
class _History:
    reached: list[int] = field(default_factory=list)
    accepted: list[int] = field(default_factory=list)
    last_len: int = 0  # context length when the last proposal was made
    last: list[int] = field(default_factory=list)  # the last proposal


def update_history(h: _History, tokens: list[int]) -> None:
    """Score the previous proposal against what was committed since (pure bookkeeping)."""
    if not h.last:
        return
    committed = tokens[h.last_len:]
    a = 0
    while a < len(h.last) and a < len(committed) and h.last[a] == committed[a]:
        a += 1
    for i in range(min(a + 1, len(h.last))):
        if i >= len(h.reached):
            h.reached.append(0)
            h.accepted.append(0)
        h.reached[i] += 1
        h.accepted[i] += 1 if i < a else 0
    h.last = []


def confidence(h: _History, k: int, prior: float, weight: float) -> list[float]:
    out = []
    for i in range(k):
        r = h.reached[i] if i < len(h.reached) else 0
        a = h.accepted[i] if i < len(h.accepted) else 0
        out.append((a + prior * weight) / (r + weight))
    return out


class NgramDrafter(Drafter):
    name = "ngram"

    def __init__(self, max_n: int = 4, min_n: int = 1, prior: float = 0.6,
                 prior_weight: float = 2.0) -> None:
        self.max_n = max_n
        self.min_n = min_n
        self.prior = prior
        self.prior_weight = prior_weight
        self.history: dict[str, _History] = {}

    def propose(self, rows: list[DraftRow], hidden: torch.Tensor | None,
                generator: torch.Generator | None = None,
                layers: torch.Tensor | None = None) -> Proposal:
        tokens, conf = [], []
        for row in rows:
            h = self.history.setdefault(row.key, _History())
            update_history(h, row.tokens)
            drafted = lookup(np.asarray(row.tokens, dtype=np.int64), row.k, self.max_n, self.min_n)
            h.last, h.last_len = drafted, len(row.tokens)
            tokens.append(drafted)
            conf.append(confidence(h, len(drafted), self.prior, self.prior_weight))
        return Proposal(tokens, conf, [None] * len(rows))

    def release(self, key: str) -> None:
        self.history.pop(key, None)
