"""Verification math: pure tensor functions, one call per round for the whole batch.

Row r verified ``lengths[r]`` draft tokens; the target scored ``lengths[r] + 1`` positions
(the pending token and each verified draft), so ``p``/``argmax`` have one more position than
the draft. Positions past a row's length are padding and never read.

- Greedy: accept the longest prefix where the draft equals the target's argmax, then emit the
  target's argmax at the first mismatch (or after the last draft: the bonus token).
- Sampling (Leviathan et al. 2023 / Chen et al. 2023): accept draft i with probability
  min(1, p_i(d_i) / q_i(d_i)); at the first rejection emit a token from
  norm(max(0, p_i - q_i)); when all pass, emit a bonus token from p_{L}. ``q`` must be exactly
  the distribution each draft token was drawn from (one-hot for greedy/deterministic drafts),
  otherwise the output no longer follows p and nothing crashes.

- Coupled (seeded requests, ``verify_coupled``): every output position i has one target
  sample fixed in advance, the Gumbel-max ``t_i = argmax(p_i / E(seed, i, .))`` with keyed
  exponential noise (``keyed``); accept the longest prefix where the draft equals it and emit
  the target's keyed sample at the first mismatch (it *is* the correction) or after the last
  draft (the bonus token). This is greedy verification against the keyed samples: lossless
  for any drafter and any q (every emitted token is the target's own sample), and the output
  is a function of (seed, prompt) alone, whatever the batch, the schedule or the drafter. A
  drafter that samples uses the same noise (``argmax(q / E)``), so drafts agree with the
  target as often as a shared-noise coupling allows: P(accept) >= (1 - TV) / (1 + TV) for the
  Gumbel coupling, below the standard rule's 1 - TV (its cost, measured in docs/engine.md).

Randomness for the standard rule comes in as pre-drawn uniforms (the engine's generator), and
the coupled rule's from (seed, position) keys, so these functions are deterministic and
unit-testable.
"""

from __future__ import annotations

import torch

from specd.worker.engine.keyed import keyed_choice


def first_false(ok: torch.Tensor, lengths: torch.Tensor) -> torch.Tensor:
    """Per row, the number of leading True among the first ``lengths[r]`` entries. ok: [B, K]."""
    k = ok.shape[1]
    if k == 0:
        return torch.zeros(ok.shape[0], dtype=torch.long, device=ok.device)
    within = torch.arange(k, device=ok.device)[None, :] < lengths[:, None]
    return (ok & within).long().cumprod(dim=1).sum(dim=1)


def verify_greedy(target_argmax: torch.Tensor, draft: torch.Tensor, lengths: torch.Tensor
                  ) -> tuple[torch.Tensor, torch.Tensor]:
    """target_argmax [B, K+1], draft [B, K], lengths [B] -> (accepted [B], next_token [B])."""
    accepted = first_false(draft == target_argmax[:, : draft.shape[1]], lengths)
    next_token = target_argmax.gather(1, accepted[:, None]).squeeze(1)
    return accepted, next_token


def _sample_rows(dist: torch.Tensor, u: torch.Tensor) -> torch.Tensor:
    """Inverse-CDF sampling: dist [B, V] (unnormalised, >= 0), u [B] in [0, 1) -> ids [B]."""
    cdf = dist.cumsum(dim=-1)
    target = u * cdf[:, -1]
    idx = torch.searchsorted(cdf, target[:, None], right=True).squeeze(1)
    return idx.clamp(max=dist.shape[-1] - 1)


def verify_sampling(p: torch.Tensor, q: torch.Tensor, draft: torch.Tensor,
                    lengths: torch.Tensor, u_accept: torch.Tensor, u_sample: torch.Tensor
                    ) -> tuple[torch.Tensor, torch.Tensor]:
    """Speculative sampling.

    p [B, K+1, V] target probabilities (temperature/top-k/top-p applied), q [B, K, V] draft
    distributions, draft [B, K], lengths [B], u_accept [B, K] and u_sample [B] uniforms.
    Returns (accepted [B], next_token [B]).
    """
    b, k = draft.shape
    if k == 0:
        return torch.zeros(b, dtype=torch.long, device=p.device), _sample_rows(p[:, 0], u_sample)
    p_d = p[:, :k].gather(2, draft[:, :, None]).squeeze(2)
    q_d = q.gather(2, draft[:, :, None]).squeeze(2)
    # accept iff u < p/q  <=>  u * q < p  (no division; q_d > 0 for a token drawn from q)
    ok = u_accept * q_d < p_d
    accepted = first_false(ok, lengths)
    rows = torch.arange(b, device=p.device)
    p_at = p[rows, accepted]  # [B, V]
    rejected = accepted < lengths
    q_at = q[rows, accepted.clamp(max=k - 1)] * rejected[:, None].to(q.dtype)
    residual = (p_at - q_at).clamp_min(0.0)
    # p == q at a rejection cannot happen in exact arithmetic; guard the rounding case
    empty = residual.sum(-1) <= 0
    residual = torch.where(empty[:, None], p_at, residual)
    return accepted, _sample_rows(residual, u_sample)


def coupled_samples(p: torch.Tensor, seeds: list[int], positions: list[int],
                    lengths: torch.Tensor) -> torch.Tensor:
    """The target's keyed samples [B, K+1]: row r at position i (i <= lengths[r]; later ones
    are padding, left 0) is ``argmax(p[r, i] / E(seeds[r], positions[r] + i, .))``."""
    b, k1, _ = p.shape
    valid = torch.arange(k1, device=p.device)[None, :] <= lengths[:, None]
    rows, cols = valid.nonzero(as_tuple=True)
    rl, cl = rows.tolist(), cols.tolist()
    picked = keyed_choice(p[rows, cols], [seeds[r] for r in rl],
                          [positions[r] + c for r, c in zip(rl, cl, strict=True)])
    out = torch.zeros(b, k1, dtype=torch.long, device=p.device)
    out[rows, cols] = picked
    return out


def verify_coupled(p: torch.Tensor, seeds: list[int], positions: list[int],
                   draft: torch.Tensor, lengths: torch.Tensor
                   ) -> tuple[torch.Tensor, torch.Tensor]:
    """Coupled speculative sampling (module doc). p [B, K+1, V] target probabilities
    (temperature/top-k/top-p applied), seeds [B], positions [B] (the output position of each
    row's first verified token), draft [B, K], lengths [B] -> (accepted [B], next_token [B])."""
    return verify_greedy(coupled_samples(p, seeds, positions, lengths), draft, lengths)


def target_probs(logits: torch.Tensor, temperature: torch.Tensor, top_k: torch.Tensor,
                 top_p: torch.Tensor) -> torch.Tensor:
    """Per-row processed distribution. logits [M, V] float; temperature/top_k/top_p [M].

    top_k 0 means no cut; top_p 1.0 means no cut. Rows must have temperature > 0.
    """
    x = logits.float() / temperature[:, None]
    need_k = bool((top_k > 0).any())
    need_p = bool((top_p < 1.0).any())
    if need_k or need_p:
        sorted_x, order = x.sort(dim=-1, descending=True)
        remove = torch.zeros_like(sorted_x, dtype=torch.bool)
        if need_k:
            ranks = torch.arange(x.shape[-1], device=x.device)[None, :]
            remove |= (top_k[:, None] > 0) & (ranks >= top_k[:, None])
        if need_p:
            probs = torch.softmax(sorted_x.masked_fill(remove, float("-inf")), dim=-1)
            before = probs.cumsum(-1) - probs  # mass strictly before each token
            remove |= before >= top_p[:, None]  # keep the smallest prefix reaching top_p
        sorted_x = sorted_x.masked_fill(remove, float("-inf"))
        x = torch.empty_like(x).scatter_(1, order, sorted_x)
    return torch.softmax(x, dim=-1)


def accept_greedy(draft: list[int], target_tokens: list[int]) -> tuple[int, int]:
    """One row, as plain lists (cheaper than tensors for a handful of tokens):
    target_tokens[i] is the target's argmax after the pending token and draft[:i]
    (len(target_tokens) == len(draft) + 1). Returns (accepted, next_token)."""
    a = 0
    n = len(draft)
    while a < n and draft[a] == target_tokens[a]:
        a += 1
    return a, target_tokens[a]
