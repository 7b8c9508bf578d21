"""Calibrate drafter confidences and measure their reliability (ECE, reliability table).

The quantity predicted is conditional acceptance: position i is accepted given positions
< i were. Per-position Platt scaling (sigmoid(a_i * z + b_i) on the raw confidence logit z)
is fitted on the calibration split and judged on the held-out test split.
"""

from __future__ import annotations

from typing import Any

import numpy as np
import torch

from specd.worker.drafters.nets import DraftLM, _max_prob_logit
from specd.worker.training.data import Split


def ece(conf: np.ndarray, correct: np.ndarray, bins: int = 15) -> float:
    """Expected calibration error with equal-width bins."""
    conf, correct = np.asarray(conf, np.float64), np.asarray(correct, np.float64)
    if conf.size == 0:
        return float("nan")
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(conf, edges[1:-1]), 0, bins - 1)
    total = 0.0
    for b in range(bins):
        sel = which == b
        if sel.any():
            total += sel.sum() * abs(conf[sel].mean() - correct[sel].mean())
    return float(total / conf.size)


def reliability_table(conf: np.ndarray, correct: np.ndarray, bins: int = 10
                      ) -> list[dict[str, float]]:
    conf, correct = np.asarray(conf, np.float64), np.asarray(correct, np.float64)
    edges = np.linspace(0.0, 1.0, bins + 1)
    which = np.clip(np.digitize(conf, edges[1:-1]), 0, bins - 1)
    rows = []
    for b in range(bins):
        sel = which == b
        rows.append({"bin": f"{edges[b]:.1f}-{edges[b + 1]:.1f}", "count": int(sel.sum()),
                     "confidence": float(conf[sel].mean()) if sel.any() else None,
                     "accuracy": float(correct[sel].mean()) if sel.any() else None})
    return rows


def fit_platt(z: np.ndarray, y: np.ndarray, iters: int = 50, l2: float = 1e-3
              ) -> tuple[float, float]:
    """Logistic regression y ~ sigmoid(a z + b) by Newton's method (tiny ridge for safety)."""
    z, y = np.asarray(z, np.float64), np.asarray(y, np.float64)
    if z.size < 10 or y.min() == y.max():
        return 1.0, 0.0
    X = np.stack([z, np.ones_like(z)], 1)

    def nll(w: np.ndarray) -> float:
        s = X @ w
        return float(np.sum(np.logaddexp(0, s) - y * s) + 0.5 * l2 * w @ w)

    w = np.zeros(2)  # Newton from the origin, with backtracking: globally convergent here
    for _ in range(iters):
        p = 1 / (1 + np.exp(-np.clip(X @ w, -60, 60)))
        grad = X.T @ (p - y) + l2 * w
        hess = (X * (p * (1 - p))[:, None]).T @ X + l2 * np.eye(2)
        step = np.linalg.solve(hess, grad)
        t, base = 1.0, nll(w)
        while nll(w - t * step) > base and t > 1e-6:
            t /= 2
        w = w - t * step
        if np.abs(t * step).max() < 1e-9:
            break
    return float(w[0]), float(w[1])


def fit_per_position(z: np.ndarray, y: np.ndarray, alive: np.ndarray, shared: bool = False
                     ) -> tuple[np.ndarray, np.ndarray]:
    """Platt (a_i, b_i) per position from samples where position i is reached."""
    K = z.shape[1]
    if shared:
        a, b = fit_platt(z[alive], y[alive])
        return np.full(K, a), np.full(K, b)
    params = [fit_platt(z[alive[:, i], i], y[alive[:, i], i]) for i in range(K)]
    return np.array([p[0] for p in params]), np.array([p[1] for p in params])


def apply_platt(z: np.ndarray, a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return 1 / (1 + np.exp(-(z * a[None, :] + b[None, :])))


@torch.no_grad()
def head_confidences(net: Any, split: Split, K: int, batch_size: int | None = None
                     ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Teacher-forced raw confidence logits z, acceptance y and reached mask, each [N, K]."""
    from specd.worker.training.train_heads import head_logits, make_teacher

    teacher = make_teacher(net, split, K)
    batch_size = batch_size or teacher.eval_batch
    zs, ys, alive = [], [], []
    for start in range(0, teacher.n, batch_size):
        batch = teacher.batch(np.arange(start, min(teacher.n, start + batch_size)))
        for key in ("hidden", "seq_hidden"):
            if key in batch:
                batch[key] = batch[key].to(net.sub_head.dtype)
        logits, conf = head_logits(net, batch)
        z = conf if conf is not None else _max_prob_logit(logits)
        acc = (logits.argmax(-1) == batch["top1"]) & batch["valid"]
        reach = torch.cumprod(torch.cat([torch.ones_like(acc[:, :1]), acc[:, :-1]], 1).float(),
                              1).bool() & batch["valid"]
        zs.append(z.float().cpu())
        ys.append(acc.cpu())
        alive.append(reach.cpu())
    return (torch.cat(zs).numpy(), torch.cat(ys).numpy().astype(np.float64),
            torch.cat(alive).numpy())


@torch.no_grad()
def draft_lm_confidences(net: DraftLM, split: Split, K: int, max_context: int = 192
                         ) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Teacher-forced max-prob logits and acceptance at every continuation position.

    Under teacher forcing, draft position i of a block starting at p is the draft model's
    prediction at p + i given the true (accepted) prefix, so every position shares one
    sample set: returned as [N, 1] arrays (callers fit one shared Platt).
    """
    from specd.worker.training.train_draft_lm import SequenceBatches

    sb = SequenceBatches(split, net.sub_index(), max_context, str(net.sub_head.device))
    zs, ys = [], []
    for start in range(0, len(sb), 8):
        batch = sb.batch(np.arange(start, min(len(sb), start + 8)))
        logits, _ = net.sub_logits(batch["ids"], use_cache=False, attention_mask=batch["mask"])
        valid = batch["valid"]
        z = _max_prob_logit(logits)[valid]
        y = (logits.argmax(-1) == batch["t_ids"][..., 0])[valid]
        zs.append(z.float().cpu())
        ys.append(y.cpu())
    z = torch.cat(zs).numpy()[:, None]
    y = torch.cat(ys).numpy().astype(np.float64)[:, None]
    return z, y, np.ones_like(z, dtype=bool)


def confidences(net: Any, split: Split, K: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    if isinstance(net, DraftLM):
        return draft_lm_confidences(net, split, K)
    return head_confidences(net, split, K)


def calibrate(net: Any, calib: Split, test: Split, K: int) -> dict[str, Any]:
    """Fit Platt parameters on ``calib`` into the net's buffers; report ECE on ``test``."""
    shared = isinstance(net, DraftLM)
    z, y, alive = confidences(net, calib, K)
    a, b = fit_per_position(z, y, alive, shared=shared)
    if shared:
        a, b = np.full(K, a[0]), np.full(K, b[0])
    zt, yt, at = confidences(net, test, K)
    before = 1 / (1 + np.exp(-zt))
    after = apply_platt(zt, a[:zt.shape[1]], b[:zt.shape[1]])
    net.calib_a.copy_(torch.as_tensor(a, dtype=net.calib_a.dtype))
    net.calib_b.copy_(torch.as_tensor(b, dtype=net.calib_b.dtype))
    return {"calibration": {"kind": "platt-per-position" if not shared else "platt-shared",
                            "a": [round(float(v), 5) for v in a],
                            "b": [round(float(v), 5) for v in b]},
            "ece_before": ece(before[at], yt[at]), "ece_after": ece(after[at], yt[at]),
            "reliability_after": reliability_table(after[at], yt[at]),
            "samples": int(at.sum())}
