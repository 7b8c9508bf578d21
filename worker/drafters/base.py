"""The drafter interface the engine calls once per round for all decoding requests.

A drafter proposes up to ``k`` tokens per request following the request's pending token (the
last committed token, not yet run through the target), with

- ``q``: the exact distribution each token was drawn from, where sampling needs it
  (``None`` for a row means one-hot at the drafted token: greedy or deterministic drafts);
- ``confidence``: per position, the predicted probability the token is accepted given the
  earlier ones were (the scheduler turns these into prefix survival).

Seeded rows (``DraftRow.seed`` set, temperature > 0) are verified by the coupled rule
(``engine/verifier.py``): a draft is accepted exactly when it equals the target's keyed sample.
A drafter that samples draws them with the same keyed noise, ``argmax(q / E)`` with
``E = keyed_exponential(seed, position + i, token)`` for its i-th token (``sample_from_logits``
with ``noise``), so it proposes the target's own sample wherever q is close to p; their q is
then not needed. Deterministic drafters (greedy, lookup) need no change.
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
    # seeded request: draw with the keyed noise of (seed, output position) instead of an RNG
    seed: int | None = None
    # for drafters with ``needs_context``: the target's final-norm hidden states at the
    # committed positions this drafter has not been given yet, oldest first, ending at the
    # last cached position (whose next token is the pending one) [m, hidden]
    context: torch.Tensor | None = None
    position: int = 0  # output position of the first token to propose (seeded rows' key)

    @property
    def coupled(self) -> bool:
        """Drafted (and verified) with keyed noise: a seeded row that samples."""
        return self.seed is not None and self.temperature > 0


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


def group_rows(rows: list[DraftRow]) -> list[tuple[float, bool, list[int]]]:
    """Rows that can share one drafting call: (temperature, coupled, row indices). Coupled
    rows draw with their own keyed noise (``keys``), the others from the shared generator."""
    groups: dict[tuple[float, bool], list[int]] = {}
    for i, row in enumerate(rows):
        groups.setdefault((row.temperature, row.coupled), []).append(i)
    return [(t, c, idx) for (t, c), idx in groups.items()]


def keys(rows: list[DraftRow], idx: list[int]) -> tuple[list[int], list[int]]:
    """(seeds, first output positions) of coupled rows, for ``nets`` propose(keys=...)."""
    return [rows[i].seed for i in idx], [rows[i].position for i in idx]  # type: ignore[misc]
