"""A small, resumable training loop shared by the drafter trainers.

Deterministic given the seed (batch order comes from ``seed + epoch``), checkpointed every
``checkpoint_every`` steps and at each epoch end (model, optimiser, schedule, position in the
epoch, history), resumed from the checkpoint when one with the same key exists. Progress bars
via tqdm. bf16 autocast on CPU (avx512-bf16) and CUDA when ``bf16`` is set.
"""

from __future__ import annotations

import math
import os
import time
from collections.abc import Callable, Iterator
from dataclasses import asdict, dataclass
from pathlib import Path
from typing import Any

import numpy as np
import torch


@dataclass(frozen=True)
class TrainSettings:
    epochs: float = 4.0
    batch_size: int = 256
    lr: float = 1e-3
    weight_decay: float = 0.0
    warmup_steps: int = 50
    seed: int = 0
    bf16: bool = True
    checkpoint_every: int = 200
    max_grad_norm: float = 1.0


def checkpoint_root() -> Path:
    return Path(os.environ.get("SPECD_CACHE", Path.home() / ".cache" / "specd")) / "checkpoints"


def epoch_order(n: int, seed: int, epoch: int) -> np.ndarray:
    return np.random.default_rng(seed * 7919 + epoch).permutation(n)


def fit(net: torch.nn.Module, n_examples: int,
        make_batch: Callable[[np.ndarray], Any],
        loss_fn: Callable[[torch.nn.Module, Any], tuple[torch.Tensor, dict[str, float]]],
        eval_fn: Callable[[torch.nn.Module], dict[str, float]],
        settings: TrainSettings, checkpoint: Path | None, progress: bool = True,
        desc: str = "train") -> list[dict[str, Any]]:
    """Train ``net`` in place; returns the per-epoch history (train loss, eval metrics)."""
    from tqdm import tqdm

    torch.manual_seed(settings.seed)
    params = [p for p in net.parameters() if p.requires_grad]
    opt = torch.optim.AdamW(params, lr=settings.lr, weight_decay=settings.weight_decay)
    steps_per_epoch = max(1, math.ceil(n_examples / settings.batch_size))
    total_steps = max(1, int(settings.epochs * steps_per_epoch))

    def lr_at(step: int) -> float:  # linear warm-up, cosine decay to 10 %
        if step < settings.warmup_steps:
            return settings.lr * (step + 1) / settings.warmup_steps
        frac = (step - settings.warmup_steps) / max(1, total_steps - settings.warmup_steps)
        return settings.lr * (0.1 + 0.9 * 0.5 * (1 + math.cos(math.pi * min(1.0, frac))))

    step, history = 0, []
    key = {"settings": asdict(settings), "n": n_examples}
    if checkpoint is not None and checkpoint.is_file():
        state = torch.load(checkpoint, weights_only=False)
        if state.get("key") == key:
            net.load_state_dict(state["net"], strict=False)
            opt.load_state_dict(state["opt"])
            step, history = state["step"], state["history"]

    def save() -> None:
        if checkpoint is None:
            return
        checkpoint.parent.mkdir(parents=True, exist_ok=True)
        tmp = checkpoint.with_suffix(".tmp")
        torch.save({"key": key, "net": net.state_dict(), "opt": opt.state_dict(),
                    "step": step, "history": history}, tmp)
        tmp.replace(checkpoint)

    device_type = "cuda" if next(net.parameters()).is_cuda else "cpu"
    bar = tqdm(total=total_steps, initial=step, desc=desc, unit="step", disable=not progress)
    net.train()
    running, started = [], time.perf_counter()
    while step < total_steps:
        epoch, offset = divmod(step, steps_per_epoch)
        order = epoch_order(n_examples, settings.seed, epoch)
        for b in range(offset, steps_per_epoch):
            if step >= total_steps:
                break
            idx = order[b * settings.batch_size:(b + 1) * settings.batch_size]
            batch = make_batch(np.sort(idx))
            for group in opt.param_groups:
                group["lr"] = lr_at(step)
            with torch.autocast(device_type, dtype=torch.bfloat16, enabled=settings.bf16):
                loss, stats = loss_fn(net, batch)
            opt.zero_grad(set_to_none=True)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(params, settings.max_grad_norm)
            opt.step()
            step += 1
            running.append(float(loss.detach()))
            bar.update(1)
            bar.set_postfix(loss=f"{np.mean(running[-50:]):.3f}", **{
                k: f"{v:.3f}" for k, v in stats.items()})
            if step % settings.checkpoint_every == 0:
                save()
        if step % steps_per_epoch == 0 or step >= total_steps:
            net.eval()
            metrics = eval_fn(net)
            net.train()
            history.append({"epoch": step / steps_per_epoch, "step": step,
                            "train_loss": float(np.mean(running[-steps_per_epoch:])) if running
                            else None, "seconds": round(time.perf_counter() - started, 1),
                            **metrics})
            bar.write(f"{desc} epoch {step / steps_per_epoch:.2f}: "
                      + ", ".join(f"{k}={v:.4f}" if isinstance(v, float) else f"{k}={v}"
                                  for k, v in history[-1].items()))
            save()
    bar.close()
    net.eval()
    return history


def batched(n: int, size: int) -> Iterator[np.ndarray]:
    for start in range(0, n, size):
        yield np.arange(start, min(n, start + size))
