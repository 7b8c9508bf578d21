"""Glue for ``specd train``: load the target, make the data, dispatch to one job module."""

from __future__ import annotations

import argparse
import logging
import shlex
import sys
import time
from pathlib import Path
from typing import Any

from specd import SpecdError

log = logging.getLogger("specd.train")


def data_settings(args: argparse.Namespace) -> Any:
    from specd.worker.training.settings import DataSettings

    return DataSettings(seed=args.seed, n_train=args.n_train, n_calib=args.n_calib,
                        n_test=args.n_test, max_new_tokens=args.max_new_tokens,
                        sampled_fraction=args.sampled_fraction,
                        extra_sampled=args.extra_sampled, extra_prompts=args.extra_prompts,
                        self_prompts=args.self_prompts,
                        batch_size=args.data_batch_size, dtype=args.data_dtype)


def command_line() -> str:
    return "specd " + " ".join(shlex.quote(a) for a in sys.argv[1:])


def parse_shard(text: str | None) -> tuple[int, int] | None:
    """``--data-shard``: None, ``claim`` -> (0, 0), or ``I/N`` -> (I, N) with 0 <= I < N."""
    if not text:
        return None
    if text == "claim":
        return (0, 0)
    try:
        i, n = (int(x) for x in text.split("/"))
    except ValueError:
        i = n = 0  # not I/N: refused below
    if not 0 <= i < n:
        raise SpecdError(f"--data-shard must be I/N with 0 <= I < N, or claim; got {text!r}")
    return (i, n)


def run_action(args: argparse.Namespace) -> int:
    import torch

    from specd.worker.model import load_model, model_fingerprint
    from specd.worker.training.data import generate_data

    if args.threads:
        torch.set_num_threads(args.threads)
    for name in ("n_train", "n_calib", "n_test", "max_new_tokens"):
        if getattr(args, name) < 1:
            raise SpecdError(f"--{name.replace('_', '-')} must be >= 1")
    for name in ("extra_sampled", "extra_prompts", "self_prompts", "backbone_mlp"):
        if getattr(args, name, 0) < 0:
            raise SpecdError(f"--{name.replace('_', '-')} must be >= 0")
    shard = parse_shard(getattr(args, "data_shard", None))  # refuse bad input before loading
    target = load_model(args.model, args.device)
    fingerprint = model_fingerprint(target)
    progress = not args.no_progress
    started = time.perf_counter()
    data_dir = generate_data(target, data_settings(args), fingerprint, progress=progress,
                             shard=shard)
    if shard is not None:
        print(f"shard {args.data_shard} done: {data_dir}")
        return 0
    log.info("data set %s (%.0fs)", data_dir, time.perf_counter() - started)
    if args.action == "data":
        print(data_dir)
        return 0
    from specd.worker.training import jobs

    return jobs.run_training_action(args, target, fingerprint, Path(data_dir), command_line())
