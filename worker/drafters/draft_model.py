"""The classic independent draft model (Leviathan et al. 2023): a small LM with its own KV
cache, run autoregressively k steps per round, batched over requests with the engine's
ragged Llama forward. Its cache is synchronised lazily: each round it keeps the longest prefix
of what it fed that is still committed, rolls the rest back by length, and feeds the
committed tokens it has not seen."""

from __future__ import annotations

import torch

from specd.worker.drafters.base import Drafter, DraftRow, Proposal
from specd.worker.drafters.nets import _max_prob_logit, sample_from_logits
from specd.worker.engine.keyed import keyed_exponential
from specd.worker.engine.llama import LlamaRunner, Row


def _common_prefix(a: list[int], b: list[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i


class DraftModelDrafter(Drafter):
    name = "draft-model"

    def __init__(self, net: torch.nn.Module, slots: int, max_context: int) -> None:
        """``net``: a bound ``nets.DraftLM`` (own layers, target embedding, sub-vocab head)."""
        llama = net.llama
        self.net = net
        self.runner = LlamaRunner.from_parts(llama.config, net.embed_weight, llama.layers,
                                             llama.norm.weight, llama.rotary_emb, net.sub_head)
        self.cache = self.runner.new_cache(slots, max_context)
        self.slot: dict[str, int] = {}
        self.fed: dict[str, list[int]] = {}
        self.max_k = 16

    def release(self, key: str) -> None:
        slot = self.slot.pop(key, None)
        self.fed.pop(key, None)
        if slot is not None:
            self.cache.release(slot)

    def nbytes(self) -> int:
        own = sum(t.nbytes for t in self.net.state_dict().values())
        return own + self.net.sub_head.nbytes + self.cache.nbytes

    @torch.inference_mode()
    def propose(self, rows: list[DraftRow], hidden: torch.Tensor | None,
                generator: torch.Generator | None = None,
                layers: torch.Tensor | None = None) -> Proposal:
        n = len(rows)
        if n == 0:
            return Proposal([], [], [])
        self.cache.compact_keyed(self.slot)  # finished requests left holes
        fwd_rows = []
        for row in rows:
            if row.key not in self.slot:
                self.slot[row.key] = self.cache.allocate()
                self.fed[row.key] = []
            slot = self.slot[row.key]
            fed = self.fed[row.key]
            keep = min(_common_prefix(fed, row.tokens), len(row.tokens) - 1)
            self.cache.truncate(slot, keep)
            fwd_rows.append(Row(slot, row.tokens[keep:], "last"))
            self.fed[row.key] = list(row.tokens)
        k_max = max(r.k for r in rows)
        tokens: list[list[int]] = [[] for _ in range(n)]
        conf: list[list[float]] = [[] for _ in range(n)]
        qs: list[list[torch.Tensor]] = [[] for _ in range(n)]
        active = list(range(n))
        for step in range(k_max):
            out = self.runner.forward(self.cache, fwd_rows)
            sub = out.logits  # [len(active), Vs] (one "last" row each)
            a_cal, b_cal = self.net.calib_a, self.net.calib_b
            pj = min(step, len(a_cal) - 1)  # per-position Platt parameters
            c = torch.sigmoid(a_cal[pj] * _max_prob_logit(sub) + b_cal[pj]).tolist()
            greedy_ids = self.net.vocab_ids[sub.argmax(-1)].tolist()
            picked = []
            for j, i in enumerate(active):
                row = rows[i]
                if row.coupled:  # seeded: the keyed sample of this output position
                    noise = keyed_exponential([row.seed], [row.position + step],
                                              self.net.vocab_ids)
                    ids, _ = sample_from_logits(sub[j: j + 1], self.net.vocab_ids,
                                                self.net.vocab_size, row.temperature,
                                                with_q=False, noise=noise)
                    tok = int(ids[0])
                elif row.temperature > 0:
                    ids, q = sample_from_logits(sub[j: j + 1], self.net.vocab_ids,
                                                self.net.vocab_size, row.temperature,
                                                generator)
                    tok = int(ids[0])
                    qs[i].append(q[0])
                else:
                    tok = greedy_ids[j]
                tokens[i].append(tok)
                conf[i].append(float(c[j]))
                picked.append(tok)
            still = [j for j, i in enumerate(active) if len(tokens[i]) < rows[i].k]
            if step + 1 == k_max or not still:
                break
            active = [active[j] for j in still]
            fwd_rows = [Row(self.slot[rows[i].key], [picked[j]], "last") for j, i in
                        zip(still, active, strict=True)]
            for j, i in zip(still, active, strict=True):
                self.fed[rows[i].key].append(picked[j])
        q_out = [torch.stack(q) if q else None for q in qs]
        return Proposal(tokens, conf, q_out)
