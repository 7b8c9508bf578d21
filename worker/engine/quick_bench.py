"""Quick side-by-side throughput: plain vs speculative groups on the same prompts, greedy.

    python -m specd.worker.engine.quick_bench --prompts 6 --max-tokens 64 --concurrency 1

Prints tokens/s, tau, truncation ratio and whether outputs match plain. (The full benchmark
is ``specd bench engine``; this is the engine author's smoke check.)
"""

from __future__ import annotations

import argparse
import time

GROUPS = {  # name -> (drafter, policy mode)
    "plain": ("none", "plain"),
    "ngram": ("ngram", "scheduled"),
    "parallel-fixed": ("parallel", "fixed"),
    "semi-ar-fixed": ("semi-ar", "fixed"),
    "semi-ar-scheduled": ("semi-ar", "scheduled"),
    "draft-model": ("draft-model", "scheduled"),
}
PROMPTS = [
    "Write a Python function that checks whether a string is a palindrome.",
    "Explain in three sentences why the sky is blue.",
    "List five fruits and their colours as a JSON object.",
    "Summarise the plot of Romeo and Juliet in one paragraph.",
    "Write a short poem about autumn leaves.",
    "What are the main differences between TCP and UDP?",
    "Give me a recipe for pancakes.",
    "Translate 'good morning, how are you?' into French and Spanish.",
]


def main() -> None:
    import torch

    from specd.api.policy import Policy
    from specd.worker.engine import Engine, EngineConfig, GenerationRequest, SamplingParams
    from specd.worker.engine.llama import LlamaRunner
    from specd.worker.model import load_model

    ap = argparse.ArgumentParser()
    ap.add_argument("--prompts", type=int, default=6)
    ap.add_argument("--max-tokens", type=int, default=64)
    ap.add_argument("--concurrency", type=int, default=1)
    ap.add_argument("--groups", default=",".join(GROUPS))
    ap.add_argument("--threads", type=int, default=0, help="torch threads (0: leave as is)")
    ap.add_argument("--drafter-path", default=None, help="'untrained' to skip artifacts")
    ap.add_argument("--k", type=int, default=3)
    ap.add_argument("--device", default="auto", help="auto (CUDA bf16 when present), cpu, cuda")
    ap.add_argument("--dtype", default="auto")
    args = ap.parse_args()
    if args.threads:
        torch.set_num_threads(args.threads)
    loaded = load_model("smollm2-135m", args.device, args.dtype)
    runner = LlamaRunner(loaded.model)
    prompts = []
    for i in range(args.prompts):
        ids = loaded.tokenizer.apply_chat_template(
            [{"role": "user", "content": PROMPTS[i % len(PROMPTS)]}], add_generation_prompt=True,
            tokenize=True)
        prompts.append(ids if isinstance(ids, list) else ids["input_ids"])
    costs = None
    plain_out = None
    print(f"{'group':20} {'tok/s':>8} {'x plain':>8} {'tau':>6} {'trunc':>6} {'match':>6}")
    base = None
    for name in args.groups.split(","):
        drafter, mode = GROUPS[name]
        policy = Policy(mode=mode, k_max=args.k, fixed_length=min(4, args.k), max_verify=args.k)
        cfg = EngineConfig(drafter=drafter, drafter_path=args.drafter_path,
                           max_slots=max(args.concurrency, 1), max_context=1024)
        engine = Engine(loaded, cfg, policy, runner=runner, costs=costs)
        engine.prepare()
        costs = engine.core.costs  # measure once, share
        engine.generate([GenerationRequest(prompts[0], SamplingParams(max_tokens=4))])  # warm-up
        outs = []
        t0 = time.perf_counter()
        for i in range(0, len(prompts), args.concurrency):
            batch = [GenerationRequest(p, SamplingParams(max_tokens=args.max_tokens))
                     for p in prompts[i: i + args.concurrency]]
            outs += engine.generate(batch)
        dt = time.perf_counter() - t0
        tokens = sum(len(o.token_ids) for o in outs)
        tps = tokens / dt
        rounds = sum(o.spec.rounds for o in outs)
        tau = sum(o.spec.accepted + o.spec.rounds for o in outs) / max(rounds, 1)
        drafted = sum(o.spec.drafted for o in outs)
        trunc = sum(o.spec.truncated for o in outs) / drafted if drafted else 0.0
        if plain_out is None and name == "plain":
            plain_out = [o.token_ids for o in outs]
            base = tps
        match = plain_out == [o.token_ids for o in outs] if plain_out is not None else None
        ratio = f"{tps / base:.2f}" if base else "-"
        print(f"{name:20} {tps:8.2f} {ratio:>8} {tau:6.2f} {trunc:6.2f} {str(match):>6}",
              flush=True)
    print("cost table:", [(t, round(s * 1e3, 1)) for t, s in zip(costs.tokens, costs.seconds,
                                                                    strict=True)])


if __name__ == "__main__":
    main()
