"""tau of a K=3 chain loop and first-position acceptance per task group of the benchmark's prompts.

    .venv/bin/python docs/bench/drafter_tau_by_group.py semi-ar,parallel [N_PROMPTS]

Drafters are artifact names under worker/artifacts/smollm2-135m/ or folders. The greedy
sequence (128 tokens, stopping at end-of-turn) comes from the first drafter's real loop (the
loop is lossless, so it is the target's own); every drafter is scored on it with the same
run-length walk as ``specd train eval``.
"""
import sys, collections, torch, numpy as np
torch.set_num_threads(2)
from specd.worker.model import load_model
from specd.worker.drafters.artifacts import load_drafter
from specd.worker.bench.prompts import read_prompt_file, encode_prompts, DEFAULT_PROMPTS
from specd.worker.training.evaluate import verify_loop, run_lengths, tau_walk
target = load_model(device="cpu", dtype="float32")
names = sys.argv[1].split(",")
dr = {n: load_drafter(n if "/" in n else f"worker/artifacts/smollm2-135m/{n}", target) for n in names}
ps = encode_prompts(read_prompt_file(DEFAULT_PROMPTS), target.tokenizer)
eos = target.tokenizer.eos_token_id
agg = collections.defaultdict(lambda: [0, 0])
first = collections.defaultdict(lambda: [0, 0])
for i, p in enumerate(ps[:int(sys.argv[2]) if len(sys.argv) > 2 else None]):
    r = verify_loop(target, dr[names[0]], p.token_ids, 5, 128, eos)
    ref = r["tokens"]
    for n in names:
        rl = run_lengths(target, dr[n], p.token_ids, ref)
        c, rr = tau_walk(rl["A"], len(ref), 3)
        for key in (p.task_group, "all"):
            agg[(n, key)][0] += c; agg[(n, key)][1] += rr
            first[(n, key)][0] += int(rl["match"][:, 0].sum()); first[(n, key)][1] += len(rl["match"])
    print(i, p.task_group, len(ref), flush=True)
for k in sorted(agg):
    c, rr = agg[k]; a, b = first[k]
    print(k, "tau3=%.3f" % (c / rr), "acc1=%.3f" % (a / b))
