"""The drafter interface the engine calls once per round for all decoding requests.

A drafter proposes up to ``k`` tokens per request following the request's pending token (the
last committed token, not yet run through the target), with

- ``q``: the exact distribution each token was drawn from, where sampling needs it
  (``None`` for a row means one-hot at the drafted token: greedy or deterministic drafts);
- ``confidence``: per position, the predicted probability the token is accepted given the
  earlier ones were (the scheduler turns these into prefix survival).
"""

from __future__ import annotations

from dataclasses import dataclass, field

import torch


@dataclass
class DraftRow:
    key: str  # request id (drafters with per-request state key on it)
    tokens: list[int]  # committed context: prompt + output, the pending token last
    k: int  # how many tokens to propose (>= 1)
    temperature: float = 0.0  # 0: greedy drafting (q one-hot)
    generator: torch.Generator | None = None  # the request's own RNG (seeded requests)
    # for drafters with ``needs_context``: the target's final-norm hidden states at the
    # committed positions this drafter has not been given yet, oldest first, ending at the
    # last cached position (whose next token is the pending one) [m, hidden]
    context: torch.Tensor | None = None


@dataclass
class Proposal:
    tokens: list[list[int]]  # per row, at most k tokens (may be fewer, or none)
    confidence: list[list[float]]  # per row, one per token
    q: list[torch.Tensor | None] = field(default_factory=list)  # per row [n, V] or None (one-hot)
    # per row, which proposer drafted it when a drafter combines several (the engine keeps
    # one online calibration per source); empty: all rows are the drafter's own
    sources: list[str] = field(default_factory=list)


class Drafter:
    """Base class: ``none`` drafts nothing."""

    name = "none"
    needs_hidden = False  # True: propose() needs the target's final-norm hidden per row
    needs_context = False  # True: rows carry the hidden states of every committed position
    # target decoder layers whose residual stream at h_p's position propose() receives as
    # ``layers`` [B, len(feature_layers), hidden] (EAGLE-3-style fused features)
    feature_layers: tuple[int, ...] = ()
    max_k = 16

    def propose(self, rows: list[DraftRow], hidden: torch.Tensor | None,
                generator: torch.Generator | None = None,
                layers: torch.Tensor | None = None) -> Proposal:
        return Proposal([[] for _ in rows], [[] for _ in rows], [None for _ in rows])

    def release(self, key: str) -> None:
        """The request finished or was cancelled: drop its state."""

    def nbytes(self) -> int:
        """Drafter-owned memory (parameters and caches), for the memory budget."""
        return 0


def group_rows(rows: list[DraftRow]) -> list[tuple[float, torch.Generator | None, list[int]]]:
    """Rows that can share one drafting call: same temperature and no private generator.

    Seeded rows draft alone with their own generator, so a seed fixes the request's output.
    """
    groups: dict[float, list[int]] = {}
    alone: list[tuple[float, torch.Generator | None, list[int]]] = []
    for i, row in enumerate(rows):
        if row.temperature > 0 and row.generator is not None:
            alone.append((row.temperature, row.generator, [i]))
        else:
            groups.setdefault(row.temperature, []).append(i)
    return [(t, None, idx) for t, idx in groups.items()] + alone
