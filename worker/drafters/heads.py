"""Drafters that read the target's final-norm hidden state: ``parallel`` (Scheme A,
Medusa-style heads) and ``semi-ar`` (Scheme B). The nets live in ``nets.py``; this adapter
batches rows by temperature and hands the engine plain lists."""

from __future__ import annotations

import torch

from specd.worker.drafters.base import Drafter, DraftRow, Proposal, group_rows, keys
from specd.worker.engine.llama import Row


class HeadDrafter(Drafter):
    needs_hidden = True

    def __init__(self, name: str, net: torch.nn.Module) -> None:
        self.name = name
        self.net = net
        self.max_k = int(net.num_positions)
        self.feature_layers = tuple(net.feature_layers)

    @torch.inference_mode()
    def propose(self, rows: list[DraftRow], hidden: torch.Tensor | None,
                generator: torch.Generator | None = None,
                layers: torch.Tensor | None = None) -> Proposal:
        if hidden is None:
            raise ValueError(f"drafter {self.name!r} needs the target's hidden states")
        if not rows:
            return Proposal([], [], [])
        hidden = self._inputs(rows, hidden)
        n = len(rows)
        tokens: list[list[int]] = [[] for _ in range(n)]
        conf: list[list[float]] = [[] for _ in range(n)]
        qs: list[torch.Tensor | None] = [None] * n
        device = hidden.device
        for temperature, coupled, idx in group_rows(rows):
            k = min(max(rows[i].k for i in idx), self.max_k)
            sel = torch.tensor(idx, device=device)
            last = torch.tensor([rows[i].tokens[-1] for i in idx], device=device)
            draft = self.net.propose(hidden[sel], last, k, temperature=temperature,
                                     generator=generator,
                                     # greedy and coupled verification need no q
                                     with_q=temperature > 0 and not coupled,
                                     keys=keys(rows, idx) if coupled else None,
                                     layers=layers[sel] if layers is not None else None)
            ids = draft.tokens.tolist()
            cs = draft.confidence.float().tolist()
            for j, i in enumerate(idx):
                kk = min(rows[i].k, k)
                tokens[i] = ids[j][:kk]
                conf[i] = cs[j][:kk]
                if draft.q is not None:
                    qs[i] = draft.q[j, :kk]
        return Proposal(tokens, conf, qs)

    def _inputs(self, rows: list[DraftRow], hidden: torch.Tensor) -> torch.Tensor:
        """What the net reads as h_p for these rows (the target's own, here)."""
        return hidden

    def nbytes(self) -> int:
        own = sum(t.nbytes for t in self.net.state_dict().values())
        return own + self.net.sub_head.nbytes  # the vocabulary-restricted LM head copy


class ContextHeadDrafter(HeadDrafter):
    """A head drafter with a context layer (``nets.ContextEncoder``) in front.

    Each round the engine hands every row the hidden states of its newly committed positions;
    they go through the context layer (the engine's ragged forward, this drafter's own one-layer
    KV cache, one slot per request) and the layer's output at the last position corrects h_p
    before the heads draft. Only committed positions enter the cache, so it never rolls back.
    """

    needs_context = True

    def __init__(self, name: str, net: torch.nn.Module, slots: int, max_context: int) -> None:
        super().__init__(name, net)
        self.encoder = net.context
        self.runner = self.encoder.runner(net.embed_weight)
        self.cache = self.runner.new_cache(slots, max_context)
        self.slot: dict[str, int] = {}

    def release(self, key: str) -> None:
        slot = self.slot.pop(key, None)
        if slot is not None:
            self.cache.release(slot)

    def nbytes(self) -> int:
        return super().nbytes() + self.cache.nbytes

    def _inputs(self, rows: list[DraftRow], hidden: torch.Tensor) -> torch.Tensor:
        """Feed each row's newly committed positions through the context layer; its output
        at the last position corrects h_p."""
        self.cache.compact_keyed(self.slot)  # finished requests left holes
        fwd, feats, nexts = [], [], []
        for row in rows:
            if row.key not in self.slot:
                self.slot[row.key] = self.cache.allocate()
            slot = self.slot[row.key]
            seen = self.cache.lengths[slot]
            m = 0 if row.context is None else row.context.shape[0]
            if m == 0 or seen + m != len(row.tokens) - 1:
                raise ValueError(f"request {row.key}: context drafter has {seen} positions and "
                                 f"got {m} new ones for {len(row.tokens)} tokens")
            nxt = row.tokens[seen + 1: seen + 1 + m]  # the token that followed each position
            fwd.append((slot, nxt))
            feats.append(row.context)
            nexts.extend(nxt)
        dtype = self.net.sub_head.dtype
        flat = torch.cat(feats).to(dtype)
        inputs = self.encoder.inputs(flat, self.net.embed(torch.tensor(nexts, device=flat.device)))
        runner_rows, at = [], 0
        for slot, nxt in fwd:
            runner_rows.append(Row(slot, nxt, "last", embeds=inputs[at: at + len(nxt)]))
            at += len(nxt)
        out = self.runner.forward(self.cache, runner_rows, logits=False)
        return self.encoder.correct(hidden.to(dtype), out.hidden)
