"""Train the head drafters (``parallel`` Medusa heads, ``semi-ar``) by self-distillation.

An example is a position p of a target continuation: input h_p (cached fp16 hidden state) and
x[p+1]; the label for draft position i (predicting x[p+1+i]) is the target's own top-k
distribution at that position, renormalised over the drafter's output vocabulary (soft
knowledge distillation). The semi-AR net is teacher-forced with the real x[p+1..p+k]; its
confidence head learns, by BCE, whether its argmax equals the target's (acceptance of
position i given the earlier positions were accepted).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch
import torch.nn.functional as F

from specd.worker.drafters.nets import ParallelHeads, SemiARDrafter, context_config
from specd.worker.training.data import Split
from specd.worker.training.trainer import TrainSettings, fit


@dataclass
class HeadExamples:
    """Index arrays over one split: example n is row ``rows[n]`` (position p)."""

    rows: np.ndarray  # [N] global row of h_p
    last: np.ndarray  # [N] x[p+1]
    targets: np.ndarray  # [N, K] token x[p+1+i] (-1 when past the end)
    teacher_rows: np.ndarray  # [N, K] row whose top-k predicts x[p+1+i] (-1 when absent)

    def __len__(self) -> int:
        return len(self.rows)


def head_examples(split: Split, K: int) -> HeadExamples:
    rows, last, targets, trows = [], [], [], []
    for s in range(len(split)):
        seq = np.asarray(split.sequence(s), dtype=np.int64)
        P, L, r0 = int(split.prompt_len[s]), len(seq), int(split.row_off[s])
        for p in range(P - 1, L - 2):  # need x[p+1] and at least x[p+2]
            rows.append(r0 + p - (P - 1))
            last.append(seq[p + 1])
            t = np.full(K, -1, dtype=np.int64)
            tr = np.full(K, -1, dtype=np.int64)
            for i in range(1, K + 1):
                if p + 1 + i <= L - 1:
                    t[i - 1] = seq[p + 1 + i]
                    tr[i - 1] = r0 + p + i - (P - 1)
            targets.append(t)
            trows.append(tr)
    return HeadExamples(np.asarray(rows, dtype=np.int64), np.asarray(last, dtype=np.int64),
                        np.stack(targets) if targets else np.zeros((0, K), np.int64),
                        np.stack(trows) if trows else np.zeros((0, K), np.int64))


def frequent_vocab(split: Split, n: int, always: list[int]) -> torch.Tensor:
    """The ``n`` tokens most often produced or predicted by the target (plus ``always``)."""
    counts = np.zeros(int(max(split.topk_ids.max(), split.seq_ids.max())) + 1, dtype=np.float64)
    for s in range(len(split)):
        seq = split.sequence(s)
        np.add.at(counts, seq[int(split.prompt_len[s]):], 1.0)
    probs = np.exp(split.topk_lp.astype(np.float32))
    np.add.at(counts, split.topk_ids.reshape(-1), probs.reshape(-1))
    order = np.argsort(-counts, kind="stable")
    always = sorted(set(always))
    top = [int(t) for t in order[:n + len(always)] if counts[t] > 0 and int(t) not in always]
    chosen = top[:max(0, n - len(always))] + always
    return torch.tensor(sorted(set(chosen)), dtype=torch.long)


class Teacher:
    """Turns example indices into tensors: hidden, tokens, soft targets over the sub-vocab."""

    eval_batch = 512  # examples per evaluation batch

    def __init__(self, split: Split, ex: HeadExamples, sub_index: torch.Tensor,
                 device: str, layers: bool = False) -> None:
        self.hidden = torch.from_numpy(np.ascontiguousarray(split.hidden))  # fp16, in memory
        self.layers = None  # residual stream after the drafter's feature layers, per row
        if layers:
            if split.layer_hidden is None:
                raise ValueError("this split has no layer hidden states: run add_layer_hidden")
            self.layers = torch.from_numpy(np.ascontiguousarray(split.layer_hidden))
        self.topk_ids = torch.from_numpy(split.topk_ids.astype(np.int64))
        self.topk_p = torch.from_numpy(np.exp(split.topk_lp.astype(np.float32)))
        self.ex, self.sub_index, self.device = ex, sub_index.cpu(), device

    @property
    def n(self) -> int:
        """Batches index examples."""
        return len(self.ex)

    def batch(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        ex = self.ex
        rows = torch.from_numpy(ex.rows[idx])
        trows = torch.from_numpy(ex.teacher_rows[idx])
        valid = trows >= 0
        safe = trows.clamp(min=0)
        ids = self.sub_index[self.topk_ids[safe]]  # [B, K, k] sub indices or -1
        p = self.topk_p[safe] * (ids >= 0) * valid[..., None]
        mass = p.sum(-1, keepdim=True)
        p = torch.where(mass > 0, p / mass.clamp(min=1e-9), p)
        top1 = torch.where(valid, ids[..., 0], torch.full_like(ids[..., 0], -2))
        targets = torch.from_numpy(ex.targets[idx])
        prev = torch.cat([torch.from_numpy(ex.last[idx])[:, None], targets[:, :-1]], 1)
        out = {"hidden": self.hidden[rows].float(), "prev": prev.clamp(min=0),
               "t_ids": ids.clamp(min=0), "t_p": p, "valid": valid & (mass[..., 0] > 0),
               "top1": top1}
        if self.layers is not None:
            out["layers"] = self.layers[rows].float()
        return {k: v.to(self.device) for k, v in out.items()}


class SequenceTeacher:
    """For drafters with a context layer: batches index whole sequences.

    A batch holds the sequences' features at every position and the tokens that followed
    (right padded), plus every example (position p of a continuation) of those sequences,
    located by (sequence in batch, position): the loss runs the context layer over the
    sequences and picks the corrected features at the examples' positions.
    """

    eval_batch = 8  # sequences per evaluation batch

    def __init__(self, split: Split, K: int, sub_index: torch.Tensor, device: str) -> None:
        self.split = split
        self.ex = head_examples(split, K)
        self.examples = Teacher(split, self.ex, sub_index, device)
        counts = [max(0, len(split.sequence(s)) - int(split.prompt_len[s]) - 1)
                  for s in range(len(split))]
        self.ex_off = np.cumsum([0] + counts).astype(np.int64)
        self.device = device

    @property
    def n(self) -> int:
        return len(self.split)

    def batch(self, idx: np.ndarray) -> dict[str, torch.Tensor]:
        sp = self.split
        seqs = [np.asarray(sp.sequence(int(s)), dtype=np.int64) for s in idx]
        T = max(len(x) - 1 for x in seqs)
        feats = torch.zeros(len(idx), T, sp.hidden.shape[1])
        nxt = torch.zeros(len(idx), T, dtype=torch.long)
        lengths = torch.tensor([len(x) - 1 for x in seqs])
        ex_idx, sel_b, sel_t = [], [], []
        for b, (s, seq) in enumerate(zip(idx, seqs, strict=True)):
            L, P = len(seq), int(sp.prompt_len[s])
            feats[b, :L - 1] = torch.from_numpy(sp.sequence_hidden(int(s))[:L - 1].astype(np.float32))
            nxt[b, :L - 1] = torch.from_numpy(seq[1:])
            lo, hi = self.ex_off[s], self.ex_off[s + 1]
            ex_idx.append(np.arange(lo, hi))
            sel_b += [b] * int(hi - lo)
            sel_t += list(range(P - 1, P - 1 + int(hi - lo)))
        out = self.examples.batch(np.concatenate(ex_idx))
        extra = {"seq_hidden": feats, "seq_next": nxt, "seq_len": lengths,
                 "sel_b": torch.tensor(sel_b), "sel_t": torch.tensor(sel_t)}
        out.update({k: v.to(self.device) for k, v in extra.items()})
        return out


def make_teacher(net: Any, split: Split, K: int) -> Teacher | SequenceTeacher:
    device = str(net.sub_head.device)
    if getattr(net, "context", None) is not None:
        return SequenceTeacher(split, K, net.sub_index(), device)
    return Teacher(split, head_examples(split, K), net.sub_index(), device,
                   layers=bool(net.feature_layers))


def kd_loss(logits: torch.Tensor, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor]:
    """Soft cross-entropy per (example, position) [B, K] and the validity mask."""
    logq = torch.log_softmax(logits.float(), dim=-1)
    ce = -(batch["t_p"] * logq.gather(-1, batch["t_ids"])).sum(-1)
    return ce, batch["valid"]


def head_logits(net: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, torch.Tensor | None]:
    if isinstance(net, SemiARDrafter):
        hidden = batch["hidden"]
        if "seq_hidden" in batch:  # context layer over whole sequences, then the examples
            ctx = net.context(batch["seq_hidden"], net.embed(batch["seq_next"]), batch["seq_len"])
            hidden = ctx[batch["sel_b"], batch["sel_t"]]
        return net(hidden, batch["prev"], layers=batch.get("layers"))
    return net(batch["hidden"]), None


def loss_fn(net: Any, batch: dict[str, torch.Tensor]) -> tuple[torch.Tensor, dict[str, float]]:
    logits, conf = head_logits(net, batch)
    ce, valid = kd_loss(logits, batch)
    loss = (ce * valid).sum() / valid.sum().clamp(min=1)
    accept = (logits.argmax(-1) == batch["top1"]).float()
    stats = {"acc1": float((accept[:, 0] * valid[:, 0]).sum() / valid[:, 0].sum().clamp(min=1))}
    if conf is not None:
        bce = F.binary_cross_entropy_with_logits(conf.float(), accept, reduction="none")
        loss = loss + (bce * valid).sum() / valid.sum().clamp(min=1)
    return loss, stats


@torch.no_grad()
def evaluate_heads(net: Any, teacher: Teacher | SequenceTeacher, K: int,
                   batch_size: int | None = None) -> dict[str, Any]:
    """Held-out KD loss, teacher-forced acceptance per position and expected tau(5)."""
    n = teacher.n
    batch_size = batch_size or teacher.eval_batch
    losses, valids, accepts, confs = [], [], [], []
    for start in range(0, n, batch_size):
        batch = teacher.batch(np.arange(start, min(n, start + batch_size)))
        logits, conf = head_logits(net, batch)
        ce, valid = kd_loss(logits, batch)
        losses.append((ce * valid).sum().item())
        valids.append(valid.cpu())
        accepts.append((logits.argmax(-1) == batch["top1"]).cpu())
        confs.append(conf.float().cpu() if conf is not None else None)
    valid = torch.cat(valids)
    accept = torch.cat(accepts) & valid
    # accepted run length under teacher forcing, capped at 5 (chain drafting, K=5)
    run = torch.cumprod(accept.float(), dim=1).sum(1)
    alive = torch.cumprod(torch.cat([torch.ones(len(accept), 1, dtype=torch.bool),
                                     accept[:, :-1]], 1).float(), 1).bool() & valid
    per_pos = [float(accept[alive[:, i], i].float().mean()) if alive[:, i].any() else 0.0
               for i in range(K)]
    return {"heldout_loss": sum(losses) / max(1, int(valid.sum())),
            "heldout_acceptance": per_pos,
            "heldout_tau5": float(run.clamp(max=5).mean() + 1)}


def default_feature_layers(num_layers: int) -> list[int]:
    """Low, middle and high layers for fused features (EAGLE-3's choice: an early layer, the
    middle one and one a few below the top, whose output h_p already summarises); none for a
    target too shallow to have three distinct ones."""
    if num_layers < 8:
        return []
    return [2, num_layers // 2, num_layers - 4]


def make_net(method: str, target_config: Any, K: int, vocab_ids: torch.Tensor,
             context: bool = False, feature_layers: list[int] | None = None,
             backbone_mlp: int = 0) -> ParallelHeads | SemiARDrafter:
    hidden_size, vocab_size = target_config.hidden_size, target_config.vocab_size
    if method == "parallel":
        return ParallelHeads(hidden_size, K, vocab_ids, vocab_size)
    if method == "semi-ar":
        return SemiARDrafter(hidden_size, K, vocab_ids, vocab_size,
                             context=context_config(target_config) if context else None,
                             feature_layers=feature_layers, backbone_mlp=backbone_mlp)
    raise ValueError(method)


def warm_start(net: Any, source: Any) -> None:
    """Copy every weight ``source`` has in the same shape.

    The output vocabulary may differ (new data can change which tokens are frequent): no
    learned weight is indexed by it -- the output rows are the target's frozen LM head rows
    for ``vocab_ids`` -- so ``net`` keeps its own ``vocab_ids`` and the rest carries over.
    """
    own = net.state_dict()
    shared = {k: v for k, v in source.state_dict().items()
              if k in own and own[k].shape == v.shape and not k.startswith("calib_")
              and k != "vocab_ids"}
    net.load_state_dict(shared, strict=False)


def train_heads(method: str, target: Any, train: Split, calib: Split, K: int,
                vocab_ids: torch.Tensor, settings: TrainSettings, checkpoint: Path | None,
                progress: bool = True, max_eval_examples: int = 6000, context: bool = False,
                init_from: Any = None, feature_layers: list[int] | None = None,
                backbone_mlp: int = 0) -> tuple[Any, list[dict[str, Any]]]:
    """Train one head drafter; returns (net bound to target, history).

    ``init_from``: a trained net of the same method whose weights start this one (warm
    start; e.g. the semi-ar heads trained without a context layer, which the zero-initialised
    context projection leaves exactly as they were at step 0).
    """
    net = make_net(method, target.model.config, K, vocab_ids, context, feature_layers,
                   backbone_mlp).bind(target)
    if init_from is not None:
        warm_start(net, init_from)
    net.float()  # train in fp32 master weights (autocast does bf16 matmuls)
    net.sub_head = net.sub_head.float()
    net.embed_weight = net.embed_weight.float()
    device = str(net.sub_head.device)
    sub_index = net.sub_index()
    if context:  # whole sequences per batch; the calibration split is small enough to use all
        tr, ev = SequenceTeacher(train, K, sub_index, device), SequenceTeacher(calib, K, sub_index, device)
        history = fit(net, tr.n, tr.batch, loss_fn, lambda m: evaluate_heads(m, ev, K),
                      settings, checkpoint, progress, desc=method)
        return net, history
    layers = bool(feature_layers)
    tr = Teacher(train, head_examples(train, K), sub_index, device, layers)
    ev_ex = head_examples(calib, K)
    if len(ev_ex) > max_eval_examples:  # bounded eval cost: a fixed, spread-out subset
        keep = np.linspace(0, len(ev_ex) - 1, max_eval_examples).astype(np.int64)
        ev_ex = HeadExamples(ev_ex.rows[keep], ev_ex.last[keep], ev_ex.targets[keep],
                             ev_ex.teacher_rows[keep])
    ev = Teacher(calib, ev_ex, sub_index, device, layers)
    history = fit(net, tr.n, tr.batch, loss_fn, lambda m: evaluate_heads(m, ev, K),
                  settings, checkpoint, progress, desc=method)
    return net, history
