"""Train the independent small draft model (``draft-model``) by distillation from the target.

The draft model is a tiny Llama (``DraftLM``) sharing the target's embeddings and LM head
rows; it starts as the target's early exit (its first layers, its final norm scaled down). It reads whole sequences (prompt, cut to its last ``max_context``
tokens, + the target's continuation) and learns, at every continuation position, the target's
top-k next-token distribution renormalised over its output vocabulary.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import numpy as np
import torch

from specd.worker.drafters.nets import DraftLM
from specd.worker.training.data import Split
from specd.worker.training.trainer import TrainSettings, fit


def init_from_target(net: DraftLM, target: Any, norm_scale: float = 0.1) -> list[int]:
    """Start as the target's early exit: its first layers, then its final norm (scaled down).

    Measured on held-out data: the first layers beat evenly spaced ones (a late layer fed an
    early residual stream produces confident garbage), and scaling the final norm by 0.1
    starts the logits near-uniform (held-out KD loss ~6 nats instead of 10-30).
    """
    src = target.model.model
    picks = list(range(len(net.llama.layers)))
    for dst, i in zip(net.llama.layers, picks, strict=True):
        dst.load_state_dict(src.layers[i].state_dict())
    with torch.no_grad():
        net.llama.norm.weight.copy_(src.norm.weight * norm_scale)
    return picks


class SequenceBatches:
    """Sequence indices -> padded ids, attention mask, soft targets at continuation positions."""

    def __init__(self, split: Split, sub_index: torch.Tensor, max_context: int, device: str,
                 pad_id: int = 0) -> None:
        self.split, self.sub_index, self.device = split, sub_index.cpu(), device
        self.max_context, self.pad_id = max_context, pad_id
        self.topk_ids = torch.from_numpy(split.topk_ids.astype(np.int64))
        self.topk_p = torch.from_numpy(np.exp(split.topk_lp.astype(np.float32)))

    def __len__(self) -> int:
        return len(self.split)

    def batch(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        sp = self.split
        pieces = []
        for s in idx:
            seq = np.asarray(sp.sequence(int(s)), dtype=np.int64)
            P = int(sp.prompt_len[s])
            cut = max(0, P - self.max_context)
            pieces.append((seq[cut:], P - cut, int(sp.row_off[s])))
        width = max(len(p[0]) for p in pieces)
        B, k = len(pieces), self.topk_ids.shape[1]
        ids = torch.full((B, width), self.pad_id, dtype=torch.long)
        mask = torch.zeros((B, width), dtype=torch.long)
        t_ids = torch.zeros((B, width, k), dtype=torch.long)
        t_p = torch.zeros((B, width, k))
        for b, (seq, P, r0) in enumerate(pieces):
            L = len(seq)
            ids[b, :L] = torch.from_numpy(seq)
            mask[b, :L] = 1
            rows = torch.arange(r0, r0 + L - P)  # positions P-1 .. L-2 predict x[P..L-1]
            sub = self.sub_index[self.topk_ids[rows]]
            p = self.topk_p[rows] * (sub >= 0)
            t_ids[b, P - 1:L - 1] = sub.clamp(min=0)
            t_p[b, P - 1:L - 1] = p / p.sum(-1, keepdim=True).clamp(min=1e-9)
        out = {"ids": ids, "mask": mask, "t_ids": t_ids, "t_p": t_p,
               "valid": t_p.sum(-1) > 0}
        return {k_: v.to(self.device) for k_, v in out.items()}


def loss_fn(net: DraftLM, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
    logits, _ = net.sub_logits(batch["ids"], use_cache=False, attention_mask=batch["mask"])
    logq = torch.log_softmax(logits.float(), dim=-1)
    ce = -(batch["t_p"] * logq.gather(-1, batch["t_ids"])).sum(-1)
    valid = batch["valid"]
    loss = (ce * valid).sum() / valid.sum().clamp(min=1)
    top1 = batch["t_ids"][..., 0]
    acc = ((logits.argmax(-1) == top1) & valid).sum() / valid.sum().clamp(min=1)
    return loss, {"acc1": float(acc)}


@torch.no_grad()
def evaluate_draft_lm(net: DraftLM, batches: SequenceBatches, batch_size: int = 8
                      ) -> dict[str, float]:
    total, count, correct = 0.0, 0, 0
    for start in range(0, len(batches), batch_size):
        batch = batches.batch(np.arange(start, min(len(batches), start + batch_size)))
        logits, _ = net.sub_logits(batch["ids"], use_cache=False, attention_mask=batch["mask"])
        logq = torch.log_softmax(logits.float(), dim=-1)
        ce = -(batch["t_p"] * logq.gather(-1, batch["t_ids"])).sum(-1)
        valid = batch["valid"]
        total += float((ce * valid).sum())
        count += int(valid.sum())
        correct += int(((logits.argmax(-1) == batch["t_ids"][..., 0]) & valid).sum())
    return {"heldout_loss": total / max(1, count), "heldout_acc1": correct / max(1, count)}


def train_draft_lm(target: Any, train: Split, calib: Split, K: int, vocab_ids: torch.Tensor,
                   settings: TrainSettings, checkpoint: Path | None, num_layers: int = 2,
                   max_context: int = 192, progress: bool = True, max_eval_sequences: int = 48
                   ) -> tuple[DraftLM, list[dict[str, Any]]]:
    cfg = target.model.config
    rope = getattr(cfg, "rope_theta", None) or (cfg.rope_parameters or {}).get("rope_theta",
                                                                                 10000.0)
    net = DraftLM(cfg.hidden_size, K, vocab_ids, cfg.vocab_size, num_layers=num_layers,
                  num_heads=cfg.num_attention_heads, num_kv_heads=cfg.num_key_value_heads,
                  intermediate_size=cfg.intermediate_size, rope_theta=float(rope),
                  rms_norm_eps=cfg.rms_norm_eps,
                  max_position_embeddings=cfg.max_position_embeddings).bind(target)
    net.float()
    net.sub_head = net.sub_head.float()
    net.embed_weight = net.embed_weight.float()
    picks = init_from_target(net, target)
    device = str(net.sub_head.device)
    sub_index = net.sub_index()
    tr = SequenceBatches(train, sub_index, max_context, device)
    ev = SequenceBatches(calib, sub_index, max_context, device)
    n_eval = min(len(ev), max_eval_sequences)

    def eval_fn(m: Any) -> dict[str, float]:
        return evaluate_draft_lm(m, _Prefix(ev, n_eval))  # type: ignore[arg-type]

    history = fit(net, len(tr), tr.batch, loss_fn, eval_fn, settings, checkpoint, progress,
                  desc="draft-model")
    history.insert(0, {"init_layers": picks})
    return net, history


class _Prefix:
    """The first ``n`` sequences of a SequenceBatches (bounded eval cost)."""

    def __init__(self, inner: SequenceBatches, n: int) -> None:
        self.inner, self.n = inner, n

    def __len__(self) -> int:
        return self.n

    def batch(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        return self.inner.batch(idx)
