"""tau of a K-chain loop with prompt lookup beside semi-ar, on the benchmark's prompts, offline.

    .venv/bin/python docs/bench/lookup_hybrid_offline.py [K] [N_PROMPTS] [PROMPT_FILE]

(PROMPT_FILE defaults to the benchmark's, ``worker/bench/prompts.jsonl``.)

For every prompt: the target's greedy continuation (128 tokens, stopping at end-of-turn; the
semi-ar real loop, lossless), semi-ar's accepted run length and calibrated confidences at every
position (``run_lengths``), and the prompt lookup's proposal there. Rules compared per
position: semi-ar alone, lookup alone, the combined drafter's rule (``LookupHybridDrafter``:
the larger expected accepted count, lookup acceptance learned online per matched length and
position, here from every position of the prompts in order; the engine learns from the rounds
it runs), and an oracle (the longer run).
"""
import sys, collections, torch, numpy as np
torch.set_num_threads(2)
from specd.worker.model import load_model
from specd.worker.drafters.artifacts import load_drafter
from specd.worker.drafters.lookup_hybrid import LookupStats, expected_accepted
from specd.worker.drafters.ngram import lookup_match
from specd.worker.bench.prompts import read_prompt_file, encode_prompts, DEFAULT_PROMPTS
from specd.worker.training.evaluate import verify_loop, run_lengths, tau_walk

K = int(sys.argv[1]) if len(sys.argv) > 1 else 3
target = load_model(device="cpu", dtype="float32")
semi = load_drafter("worker/artifacts/smollm2-135m/semi-ar", target)
ps = encode_prompts(read_prompt_file(sys.argv[3] if len(sys.argv) > 3 else DEFAULT_PROMPTS),
                    target.tokenizer)
eos = target.tokenizer.eos_token_id
stats = LookupStats(max_n=4, k=K)
agg = collections.defaultdict(lambda: [0, 0])
used = 0
for i, p in enumerate(ps[:int(sys.argv[2]) if len(sys.argv) > 2 else None]):
    ref = verify_loop(target, semi, p.token_ids, 5, 128, eos)["tokens"]
    rl = run_lengths(target, semi, p.token_ids, ref)
    n = len(ref) - 1
    A_semi = np.minimum(rl["A"], K)
    A_look, A_hyb = np.zeros(n, int), np.zeros(n, int)
    for j in range(n):
        ctx = np.asarray(list(p.token_ids) + ref[:j + 1], dtype=np.int64)
        prop, m = lookup_match(ctx, K)
        truth = ref[j + 1:j + 1 + K]
        a = 0
        while a < len(prop) and a < len(truth) and prop[a] == truth[a]:
            a += 1
        A_look[j] = a
        A_hyb[j] = A_semi[j]
        if prop:
            mine = expected_accepted(stats.confidence(m, len(prop)))
            if mine > expected_accepted(list(rl["conf_cal"][j, :K])):
                A_hyb[j] = a
                used += 1
            stats.score(m, prop, truth)  # what the engine learns from the committed tokens
    for name, A in (("semi-ar", A_semi), ("lookup", A_look), ("semi-ar+lookup", A_hyb),
                    ("oracle", np.maximum(A_semi, A_look))):
        c, r = tau_walk(A, len(ref), K)
        for key in (p.task_group, "all"):
            agg[(name, key)][0] += c
            agg[(name, key)][1] += r
    print(i, p.task_group, len(ref), flush=True)
groups = ("all", "chat", "code", "long-form", "structured")
print(f"K={K}, positions where lookup was chosen: {used}")
for name in ("semi-ar", "lookup", "semi-ar+lookup", "oracle"):
    print(f"{name:16s}", " ".join(f"{g}={agg[(name, g)][0] / agg[(name, g)][1]:.3f}" for g in groups))
