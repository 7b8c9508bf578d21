"""``specd train``: build the self-distillation data, train drafters, calibrate, evaluate.

    specd train data                       generate / reuse the cached data set
    specd train parallel|semi-ar|draft-model   train one drafter (data first if needed)
    specd train all                        data, the three drafters, calibration, eval
    specd train eval --json OUT            evaluate artifacts: tau for K=1..7, acceptance,
                                           ECE, draft cost; JSON + PNG plot

Artifacts go to worker/artifacts/<model>/<method>/ unless --out-dir says otherwise.
"""

from __future__ import annotations

import argparse

HELP = "train drafters (data | parallel | semi-ar | draft-model | all | eval)"

ACTIONS = ("data", "parallel", "semi-ar", "draft-model", "all", "eval")


def add_arguments(parser: argparse.ArgumentParser) -> None:
    from specd.worker.training.settings import DataSettings

    d = DataSettings()
    parser.add_argument("action", choices=ACTIONS, help="what to do")
    parser.add_argument("--model", default="smollm2-135m", help="target model reference")
    parser.add_argument("--device", default="auto", help="auto, cpu or cuda[:N]")
    parser.add_argument("--seed", type=int, default=d.seed, help="seed for data and training")
    parser.add_argument("--threads", type=int, default=0,
                        help="torch CPU threads (0: torch's default)")
    g = parser.add_argument_group("data")
    g.add_argument("--n-train", type=int, default=d.n_train, help="training prompts")
    g.add_argument("--n-calib", type=int, default=d.n_calib, help="calibration prompts")
    g.add_argument("--n-test", type=int, default=d.n_test, help="held-out test prompts")
    g.add_argument("--max-new-tokens", type=int, default=d.max_new_tokens,
                   help="continuation length per prompt")
    g.add_argument("--sampled-fraction", type=float, default=d.sampled_fraction,
                   help="share of train prompts continued by sampling instead of greedy")
    g.add_argument("--extra-sampled", type=int, default=d.extra_sampled,
                   help="extra sampled (T=0.8) continuations per train prompt")
    g.add_argument("--extra-prompts", type=int, default=d.extra_prompts,
                   help="add this many broad prompts (chat, writing, ...: broad_prompts.py) "
                        "to the training split")
    g.add_argument("--self-prompts", type=int, default=d.self_prompts,
                   help="add this many prompts the target writes itself (Magpie-style: "
                        "self_prompts.py) to the training split")
    g.add_argument("--data-batch-size", type=int, default=d.batch_size,
                   help="prompts decoded together")
    g.add_argument("--data-dtype", default=d.dtype, help="target dtype while generating data")
    g.add_argument("--data-shard", default=None, metavar="I/N",
                   help="only fill batches b %% N == I of the chunk cache, or 'claim' the next "
                        "free one (parallel workers)")
    t = parser.add_argument_group("training")
    t.add_argument("--K", type=int, default=7, help="draft positions the heads learn")
    t.add_argument("--epochs", type=float, default=None, help="epochs (method default if unset)")
    t.add_argument("--batch-size", type=int, default=None, help="training batch size")
    t.add_argument("--lr", type=float, default=None, help="learning rate")
    t.add_argument("--num-vocab", type=int, default=None,
                   help="size of the drafter's output vocabulary (most frequent tokens)")
    t.add_argument("--draft-layers", type=int, default=2, help="layers of the draft model")
    t.add_argument("--context-layer", action="store_true",
                   help="semi-ar with an EAGLE-style context layer over the target's hidden "
                        "states of every position (default: the backbone reads h_p alone)")
    t.add_argument("--feature-layers", default="auto", metavar="L1,L2,...|auto|none",
                   help="semi-ar also reads the target's residual stream after these decoder "
                        "layers (0-based; EAGLE-3-style fused low/mid/high features); auto: "
                        "layers 2, L/2 and L-4 of an L-layer target (2,15,26 for SmolLM2-135M)")
    t.add_argument("--backbone-mlp", type=int, default=0, metavar="WIDTH",
                   help="semi-ar: a SwiGLU MLP of this width in the backbone over [h ; "
                        "e(x[p+1])] (0: one linear layer, as before); zero-initialised, so "
                        "with --init-from it starts as the source drafter")
    t.add_argument("--init-from", default=None, metavar="ARTIFACT",
                   help="warm start from a trained artifact of the same method (folder)")
    t.add_argument("--out-dir", default=None,
                   help="artifact root (default: worker/artifacts/<model>)")
    t.add_argument("--checkpoint-dir", default=None,
                   help="checkpoints for resuming (default: ~/.cache/specd/checkpoints)")
    t.add_argument("--no-progress", action="store_true", help="no progress bars")
    e = parser.add_argument_group("eval")
    e.add_argument("--methods", default="parallel,semi-ar,draft-model",
                   help="artifacts to evaluate (short names or folders), comma-separated")
    e.add_argument("--eval-prompts", type=int, default=None,
                   help="held-out prompts to evaluate on (default: all)")
    e.add_argument("--eval-prompts-file", default=None, metavar="JSONL",
                   help="evaluate on this prompt file (the benchmark's format) instead of the "
                        "held-out test split")
    e.add_argument("--eval-tokens", type=int, default=96, help="tokens generated per prompt")
    e.add_argument("--json", default=None, help="write the evaluation JSON here")
    e.add_argument("--plot", default=None, help="PNG plot path (default: next to --json)")
    e.add_argument("--record", action="store_true",
                   help="also store the figures in each evaluated artifact's metadata.json")


def run(args: argparse.Namespace) -> int:
    from specd.worker.training.pipeline import run_action

    return run_action(args)
