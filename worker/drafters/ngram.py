"""Prompt-lookup drafting (no training): find the latest earlier occurrence of the context's
last n tokens and propose what followed it. Deterministic, so q is one-hot."""

from __future__ import annotations

import numpy as np
import torch

from specd.worker.drafters.base import Drafter, DraftRow, Proposal


def lookup(tokens: np.ndarray, k: int, max_n: int = 4, min_n: int = 1) -> list[int]:
    """Up to k tokens following the most recent earlier match of the longest suffix n-gram."""
    length = len(tokens)
    for n in range(min(max_n, length - 1), min_n - 1, -1):
        tail = tokens[length - n:]
        windows = np.lib.stride_tricks.sliding_window_view(tokens[: length - 1], n)
        hits = np.flatnonzero((windows == tail).all(axis=1))
        if hits.size:
            # the latest match that still has k tokens after it, else the earliest match
            full = hits[hits + n + k <= length]
            start = int(full[-1] if full.size else hits[0]) + n
            return tokens[start: start + k].tolist()
    return []


class NgramDrafter(Drafter):
    name = "ngram"

    def __init__(self, max_n: int = 4, min_n: int = 1, confidence: float = 0.6) -> None:
        self.max_n = max_n
        self.min_n = min_n
        # a fixed prior: a prompt-lookup match carries no per-token confidence of its own
        self.conf = confidence

    def propose(self, rows: list[DraftRow], hidden: torch.Tensor | None,
                generator: torch.Generator | None = None) -> Proposal:
        tokens, conf = [], []
        for row in rows:
            drafted = lookup(np.asarray(row.tokens, dtype=np.int64), row.k, self.max_n, self.min_n)
            tokens.append(drafted)
            conf.append([self.conf] * len(drafted))
        return Proposal(tokens, conf, [None] * len(rows))
