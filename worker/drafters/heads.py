"""Drafters that read the target's final-norm hidden state: ``parallel`` (Scheme A,
Medusa-style heads) and ``semi-ar`` (Scheme B). The nets live in ``nets.py``; this adapter
batches rows by temperature and hands the engine plain lists."""

from __future__ import annotations

import torch

from specd.worker.drafters.base import Drafter, DraftRow, Proposal, group_rows


class HeadDrafter(Drafter):
    needs_hidden = True

    def __init__(self, name: str, net: torch.nn.Module) -> None:
        self.name = name
        self.net = net
        self.max_k = int(net.num_positions)

    @torch.inference_mode()
    def propose(self, rows: list[DraftRow], hidden: torch.Tensor | None,
                generator: torch.Generator | None = None) -> Proposal:
        if hidden is None:
            raise ValueError(f"drafter {self.name!r} needs the target's hidden states")
        n = len(rows)
        tokens: list[list[int]] = [[] for _ in range(n)]
        conf: list[list[float]] = [[] for _ in range(n)]
        qs: list[torch.Tensor | None] = [None] * n
        device = hidden.device
        for temperature, own_gen, idx in group_rows(rows):
            k = min(max(rows[i].k for i in idx), self.max_k)
            sel = torch.tensor(idx, device=device)
            last = torch.tensor([rows[i].tokens[-1] for i in idx], device=device)
            draft = self.net.propose(hidden[sel], last, k, temperature=temperature,
                                     generator=own_gen or generator,
                                     with_q=temperature > 0)  # greedy verify needs no q
            ids = draft.tokens.tolist()
            cs = draft.confidence.float().tolist()
            for j, i in enumerate(idx):
                kk = min(rows[i].k, k)
                tokens[i] = ids[j][:kk]
                conf[i] = cs[j][:kk]
                if temperature > 0:
                    qs[i] = draft.q[j, :kk]
        return Proposal(tokens, conf, qs)

    def nbytes(self) -> int:
        own = sum(t.nbytes for t in self.net.state_dict().values())
        return own + self.net.sub_head.nbytes  # the vocabulary-restricted LM head copy
