"""c=32 back to back: plain and semi-ar-scheduled engines alternate, 3 times each, same 40 prompts.

Kept as the script behind engine-cpu-2026-11-29-v6-c32-alternation.json; the benchmark now does
this itself: specd bench engine --groups plain,semi-ar-scheduled --concurrency 32 --min-seconds 60

    .venv/bin/python docs/bench/alternate_c32.py   # prints per-run tokens/s and the JSON summary
"""
import time, torch, json, statistics as S
torch.set_num_threads(2)
from specd.api.policy import Policy
from specd.worker.engine import Engine, EngineConfig, GenerationRequest, SamplingParams
from specd.worker.engine.llama import LlamaRunner
from specd.worker.model import load_model
from specd.worker.bench.prompts import DEFAULT_PROMPTS, encode_prompts, read_prompt_file
loaded = load_model("smollm2-135m", "cpu", "auto")
prompts = encode_prompts(read_prompt_file(DEFAULT_PROMPTS)[:40], loaded.tokenizer)
runner = LlamaRunner(loaded.model)
sched = Engine(loaded, EngineConfig(drafter="semi-ar", max_slots=32, max_context=512), Policy(mode="scheduled", k_max=3, max_verify=3, fixed_length=3), runner=runner)
sched.prepare()
plain = Engine(loaded, EngineConfig(drafter="none", max_slots=32, max_context=512), Policy(mode="plain"), runner=runner, costs=sched.core.costs)
res = {"plain": [], "semi-ar-scheduled": []}
ref = None
for rep in range(3):
    order = [("plain", plain), ("semi-ar-scheduled", sched)]
    if rep % 2: order.reverse()
    for name, eng in order:
        t0 = time.perf_counter()
        outs = eng.generate([GenerationRequest(p.token_ids, SamplingParams(max_tokens=128, ignore_eos=True)) for p in prompts])
        tps = sum(len(o.token_ids) for o in outs) / (time.perf_counter() - t0)
        res[name].append(round(tps, 1))
        toks = [o.token_ids for o in outs]
        if name == "plain": ref = toks
        print(name, rep, round(tps, 1), "match" if ref is None or toks == ref else "DIFF", flush=True)
ratios = [s / p for s, p in zip(res["semi-ar-scheduled"], res["plain"])]
print(json.dumps({"tokens_per_s": res, "ratio_per_pair": [round(r, 3) for r in ratios], "median_ratio": round(S.median(ratios), 3)}))
