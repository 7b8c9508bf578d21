"""``specd train <method>|all|eval`` after the data exists: train, calibrate, save, evaluate."""

from __future__ import annotations

import argparse
import hashlib
import json
import logging
import time
from dataclasses import asdict
from pathlib import Path
from typing import Any

import numpy as np

from specd import SpecdError

log = logging.getLogger("specd.train")

DEFAULTS: dict[str, dict[str, Any]] = {
    "parallel": {"epochs": 3.0, "batch_size": 256, "lr": 3e-3, "num_vocab": 3072},
    "semi-ar": {"epochs": 3.0, "batch_size": 256, "lr": 3e-3, "num_vocab": 3072},
    # semi-ar with its context layer: batches are whole sequences
    "semi-ar-context": {"epochs": 2.0, "batch_size": 8, "lr": 2e-3, "num_vocab": 3072},
    "draft-model": {"epochs": 4.0, "batch_size": 8, "lr": 1.5e-3, "num_vocab": 3072},
}


def _uses_context(args: argparse.Namespace, method: str) -> bool:
    return method == "semi-ar" and getattr(args, "context_layer", False)


def _feature_layers(args: argparse.Namespace, method: str, num_layers: int) -> list[int]:
    from specd.worker.training.train_heads import default_feature_layers

    text = (getattr(args, "feature_layers", None) or "none").strip()
    if method != "semi-ar" or text == "none":
        return []
    if text == "auto":  # the context-layer variant reads h_p over the whole context instead
        return [] if _uses_context(args, method) else default_feature_layers(num_layers)
    if _uses_context(args, method):
        raise SpecdError("--feature-layers and --context-layer cannot be combined")
    try:
        layers = [int(x) for x in text.split(",") if x.strip()]
    except ValueError:
        raise SpecdError(f"--feature-layers: expected comma-separated layer numbers, 'auto' or "
                         f"'none', got {text!r}") from None
    if not layers or not all(0 <= li < num_layers for li in layers):
        raise SpecdError(f"--feature-layers: the target has layers 0..{num_layers - 1}")
    return layers


def _backbone_mlp(args: argparse.Namespace, method: str) -> int:
    width = getattr(args, "backbone_mlp", 0) or 0  # >= 0: checked before any loading
    return width if method == "semi-ar" else 0  # the other methods have no backbone


def _settings(args: argparse.Namespace, method: str) -> Any:
    from specd.worker.training.trainer import TrainSettings

    d = DEFAULTS["semi-ar-context" if _uses_context(args, method) else method]
    return TrainSettings(epochs=args.epochs or d["epochs"], batch_size=args.batch_size or d["batch_size"],
                         lr=args.lr or d["lr"], seed=args.seed,
                         warmup_steps=20 if method == "draft-model" else 50)


def _out_dir(args: argparse.Namespace, target: Any) -> Path:
    from specd.worker.drafters.artifacts import artifacts_root, target_alias

    return Path(args.out_dir) if args.out_dir else artifacts_root() / target_alias(target)


def train_method(method: str, args: argparse.Namespace, target: Any, fingerprint: str,
                 data_dir: Path, command: str) -> Path:
    import torch

    from specd.worker.drafters.artifacts import save_drafter
    from specd.worker.training.calibrate import calibrate
    from specd.worker.training.data import (
        add_layer_hidden,
        add_prompt_hidden,
        load_meta,
        load_split,
    )
    from specd.worker.training.train_draft_lm import train_draft_lm
    from specd.worker.training.train_heads import train_heads
    from specd.worker.training.trainer import checkpoint_root

    torch.manual_seed(args.seed)
    meta = load_meta(data_dir)
    context = _uses_context(args, method)
    if context:  # the context layer also reads the prompt's hidden states
        add_prompt_hidden(target, data_dir, progress=not args.no_progress)
    feature_layers = _feature_layers(args, method, target.model.config.num_hidden_layers)
    backbone_mlp = _backbone_mlp(args, method)
    if feature_layers:
        add_layer_hidden(target, data_dir, tuple(feature_layers), progress=not args.no_progress)
    train, calib, test = (load_split(data_dir, s) for s in ("train", "calib", "test"))
    init = None
    if getattr(args, "init_from", None) and method != "draft-model":
        from specd.worker.drafters.artifacts import load_drafter

        init = load_drafter(args.init_from, target)
        if init.method != method:
            raise SpecdError(f"--init-from holds a {init.method!r} drafter, not {method!r}")
    vocab_ids = output_vocab(train, method, args.num_vocab, init, target.tokenizer.eos_token_id)
    coverage = _coverage(test, vocab_ids)
    log.info("%s: %d output tokens cover %.1f%% of held-out target tokens", method,
             len(vocab_ids), 100 * coverage)
    settings = _settings(args, method)
    ckpt_dir = Path(args.checkpoint_dir) if args.checkpoint_dir else checkpoint_root()
    variant = (("-ctx" if context else "") + _warm_tag(getattr(args, "init_from", None), target)
               + "".join(f"-L{li}" for li in feature_layers)
               + (f"-mlp{backbone_mlp}" if backbone_mlp else ""))
    ckpt = checkpoint_path(ckpt_dir, meta["hash"], method, variant, vocab_ids, args.K,
                           args.seed)
    started = time.perf_counter()
    if method == "draft-model":
        net, history = train_draft_lm(target, train, calib, args.K, vocab_ids, settings, ckpt,
                                      num_layers=args.draft_layers, progress=not args.no_progress)
    else:
        net, history = train_heads(method, target, train, calib, args.K, vocab_ids, settings,
                                   ckpt, progress=not args.no_progress, context=context,
                                   init_from=init, feature_layers=feature_layers,
                                   backbone_mlp=backbone_mlp)
    train_s = time.perf_counter() - started
    cal = calibrate(net, calib, test, args.K)
    log.info("%s: ECE on held-out data %.4f -> %.4f after calibration", method,
             cal["ece_before"], cal["ece_after"])
    out = _out_dir(args, target) / method
    stage = {"command": command, "data_hash": meta["hash"], "settings": asdict(settings),
             "wall_seconds": round(train_s, 1),
             **{k: history[-1][k] for k in ("heldout_loss", "heldout_tau5") if history
                and k in history[-1]}}
    extra = {
        "num_positions": args.K,
        "data": {"hash": meta["hash"], "settings": meta["settings"], "rows": meta["rows"],
                 "splits": meta["splits"]},
        "training": {"settings": asdict(settings), "history": history,
                     "wall_seconds": round(train_s, 1), "device": str(target.device),
                     "torch_threads": torch.get_num_threads(),
                     "vocab_coverage_heldout": round(coverage, 4)},
        "calibration": cal["calibration"],
        "heldout": {"ece_before": cal["ece_before"], "ece_after": cal["ece_after"],
                    "reliability_after": cal["reliability_after"], "samples": cal["samples"]},
        "command": command,
        # every training stage that led here, oldest first (warm starts chain artifacts)
        "lineage": _lineage(getattr(args, "init_from", None), target) + [stage],
    }
    save_drafter(net, out, method, fingerprint, target.source.reference, extra)
    log.info("%s: saved %s (%.0fs training)", method, out, train_s)
    return out


def stage_of(meta: dict[str, Any]) -> dict[str, Any]:
    """One training stage as recorded in ``lineage``, from an artifact's metadata."""
    training = meta.get("training", {})
    last = (training.get("history") or [{}])[-1]
    return {"command": meta.get("command"), "data_hash": meta.get("data", {}).get("hash"),
            "settings": training.get("settings"), "wall_seconds": training.get("wall_seconds"),
            **{k: last[k] for k in ("heldout_loss", "heldout_tau5") if k in last}}


def output_vocab(train: Any, method: str, num_vocab: int | None, init: Any,
                 eos_id: int) -> Any:
    """The drafter's output tokens: the data set's most frequent ones, or, for a warm start
    without ``--num-vocab``, its source's -- continuing on a narrower data set must not drop
    tokens the source drafts (a self-prompt data set with few Chinese prompts covered 85 % of
    held-out target tokens with its own top 3,072, the source's vocabulary 91 %)."""
    from specd.worker.training.train_heads import frequent_vocab

    if init is not None and not num_vocab:
        return init.vocab_ids.detach().cpu().clone()
    return frequent_vocab(train, num_vocab or DEFAULTS[method]["num_vocab"], [eos_id])


def checkpoint_path(root: Path, data_hash: str, method: str, variant: str, vocab_ids: Any,
                    K: int, seed: int) -> Path:
    """The output vocabulary is part of the net (a buffer), so it is part of the key: a
    checkpoint made with another vocabulary is never resumed into this run."""
    vocab = hashlib.sha256(np.asarray(vocab_ids).astype(np.int64).tobytes()).hexdigest()[:8]
    return root / f"{data_hash}-{method}{variant}-v{vocab}-K{K}-s{seed}.pt"


def _warm_tag(init_from: str | None, target: Any) -> str:
    """Checkpoint-name part for a warm start: names the source's weights, so two warm starts
    with the same settings from different artifacts never resume each other's checkpoint."""
    if not init_from:
        return ""
    import hashlib

    from specd.worker.drafters.artifacts import WEIGHTS_FILE, resolve_artifact

    weights = resolve_artifact(init_from, target) / WEIGHTS_FILE
    return "-warm" + hashlib.sha256(weights.read_bytes()).hexdigest()[:8]


def _lineage(init_from: str | None, target: Any) -> list[dict[str, Any]]:
    """The stages behind a warm start's source artifact (empty for a run from scratch)."""
    if not init_from:
        return []
    from specd.worker.drafters.artifacts import read_metadata, resolve_artifact

    source = read_metadata(resolve_artifact(init_from, target))
    return list(source.get("lineage") or [stage_of(source)])


def _coverage(split: Any, vocab_ids: Any) -> float:
    allowed = np.zeros(int(max(vocab_ids.max().item(), split.seq_ids.max())) + 1, dtype=bool)
    allowed[vocab_ids.numpy()] = True
    hits = total = 0
    for s in range(len(split)):
        cont = split.sequence(s)[int(split.prompt_len[s]):]
        hits += int(allowed[cont].sum())
        total += len(cont)
    return hits / max(1, total)


def eval_prompts(args: argparse.Namespace, target: Any, data_dir: Path) -> list[list[int]]:
    """Prompt token ids to evaluate on: the held-out test split, or ``--eval-prompts-file``
    (a benchmark JSONL: prompts no template made, to see how far the drafters generalise)."""
    if args.eval_prompts_file:
        from specd.worker.bench.prompts import encode_prompts, read_prompt_file

        ids = [p.token_ids for p in encode_prompts(read_prompt_file(args.eval_prompts_file),
                                                   target.tokenizer)]
    else:
        from specd.worker.training.data import load_split

        test = load_split(data_dir, "test")
        ids = [list(map(int, test.sequence(i)[:int(test.prompt_len[i])]))
               for i in range(len(test))]
    return ids if args.eval_prompts is None else ids[:args.eval_prompts]


def run_eval(args: argparse.Namespace, target: Any, data_dir: Path) -> dict[str, Any]:
    from specd.worker.drafters.artifacts import load_drafter
    from specd.worker.training.evaluate import evaluate_drafters, plot, summary_table

    names = [m.strip() for m in args.methods.split(",") if m.strip()]
    if not names:
        raise SpecdError("--methods names no drafter")
    base = _out_dir(args, target)
    drafters, paths = {}, {}
    for name in names:
        where = base / name if (base / name).is_dir() else Path(name)
        net = load_drafter(where, target)
        key = net.method if net.method not in drafters else name
        drafters[key], paths[key] = net, where
    prompts = eval_prompts(args, target, data_dir)
    result = evaluate_drafters(target, drafters, prompts, args.eval_tokens,
                               progress=not args.no_progress)
    for figures in result.values():
        figures["eval_set"]["source"] = args.eval_prompts_file or "test split"
    if args.json:
        Path(args.json).parent.mkdir(parents=True, exist_ok=True)
        Path(args.json).write_text(json.dumps(result, indent=2) + "\n")
        plot_path = args.plot or str(Path(args.json).with_suffix(".png"))
        plot(result, plot_path)
        log.info("wrote %s and %s", args.json, plot_path)
    else:
        print(json.dumps(result, indent=2))
    print(summary_table(result))
    if getattr(args, "record", False):
        from specd.worker.drafters.artifacts import update_metadata
        from specd.worker.training.pipeline import command_line  # pipeline imports this module

        for key, figures in result.items():
            update_metadata(paths[key], {"eval": {k: v for k, v in figures.items()
                                                  if k != "reliability_after"},
                                         "eval_command": command_line()})
    return result


def run_training_action(args: argparse.Namespace, target: Any, fingerprint: str,
                        data_dir: Path, command: str) -> int:
    import torch

    if args.K < 1 or args.K > 16:
        raise SpecdError("--K must be in 1..16")
    torch.manual_seed(args.seed)
    if args.action == "eval":
        run_eval(args, target, data_dir)
        return 0
    methods = ["parallel", "semi-ar", "draft-model"] if args.action == "all" else [args.action]
    outs = [train_method(m, args, target, fingerprint, data_dir, command) for m in methods]
    if args.action == "all":
        args.methods = ",".join(str(o) for o in outs)
        args.record = True
        result = run_eval(args, target, data_dir)
        for name, figures in result.items():
            log.info("%s: tau %s", name, figures["tau"])
    for out in outs:
        print(out)
    return 0
