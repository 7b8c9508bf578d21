"""Where a plain decode round's time goes on a GPU: wall time per round against the GPU's own
kernel time, from torch.profiler, for one request and for a batch.

    python docs/bench/gpu_profile.py --device cuda --dtype bfloat16 --out out

One engine (plain, no drafter, no cost profile); per concurrency C, C copies of one prompt
decode 48 tokens; rounds 9-40 are profiled (the first ones warm up). Prints per round: wall
ms, CUDA kernel ms (sum of kernel self time), the share of the round the GPU was busy, kernel
launches, and the top operators by CPU time; writes the profiler tables to --out.
"""

from __future__ import annotations

import argparse
import time
from pathlib import Path


def main() -> None:
    import torch
    from torch.profiler import ProfilerActivity, profile

    from specd.api.policy import Policy
    from specd.worker.engine import Engine, EngineConfig, GenerationRequest, SamplingParams
    from specd.worker.model import load_model

    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--device", default="cuda")
    ap.add_argument("--dtype", default="bfloat16")
    ap.add_argument("--concurrency", default="1,16")
    ap.add_argument("--out", default="out")
    args = ap.parse_args()
    out = Path(args.out)
    out.mkdir(parents=True, exist_ok=True)
    loaded = load_model("smollm2-135m", args.device, args.dtype)
    ids = loaded.tokenizer.apply_chat_template(
        [{"role": "user", "content": "Write a short story about a lighthouse keeper."}],
        add_generation_prompt=True)
    ids = list(ids if isinstance(ids, list) else ids["input_ids"])
    cuda = args.device.startswith("cuda")
    for c in [int(x) for x in args.concurrency.split(",")]:
        engine = Engine(loaded, EngineConfig(drafter="none", max_slots=c, max_context=512,
                                             cost_profile="none"), Policy(mode="plain"))
        engine.prepare()
        core = engine.core
        for _ in range(c):
            core.add(GenerationRequest(list(ids), SamplingParams(max_tokens=48, ignore_eos=True)),
                     lambda event: None)
        for _ in range(8):  # prefill and warm-up rounds
            core.step()
        activities = [ProfilerActivity.CPU] + ([ProfilerActivity.CUDA] if cuda else [])
        rounds = 32
        with profile(activities=activities) as prof:
            t0 = time.perf_counter()
            for _ in range(rounds):
                core.step()
            if cuda:
                torch.cuda.synchronize()
            wall = time.perf_counter() - t0
        events = prof.key_averages()
        kernel_us = sum(e.self_device_time_total for e in events) if cuda else 0.0
        launches = sum(e.count for e in events if e.key in ("cudaLaunchKernel",
                                                             "cuLaunchKernel",
                                                             "cudaLaunchKernelExC"))
        print(f"c={c}: {1000 * wall / rounds:.2f} ms a round (wall), GPU kernels "
              f"{kernel_us / 1000 / rounds:.2f} ms a round ({kernel_us / 1e6 / wall:.0%} busy), "
              f"{launches / rounds:.0f} kernel launches a round")
        table = events.table(sort_by="self_cpu_time_total", row_limit=25)
        print(table)
        (out / f"profile-c{c}-cpu.txt").write_text(table)
        if cuda:
            (out / f"profile-c{c}-cuda.txt").write_text(
                events.table(sort_by="self_device_time_total", row_limit=25))


if __name__ == "__main__":
    main()
