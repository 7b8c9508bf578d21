"""What Scheme B's engine adds to a plain round: its gate held shut, against plain decoding.

    .venv/bin/python docs/bench/plain_round_overhead.py bfloat16 32

Two engines on the first C benchmark prompts (128 tokens, EOS ignored, one batch of C): plain
decoding, and Scheme B (semi-ar drafter, scheduled) with its draft gate answering "plain" in
every round, so both run the same forwards. Each runs twice, the order turned, under cProfile;
prints each run's seconds and, per engine, the function calls and the cumulative seconds of
the round's phases (``_draft``, ``_verify_round``, ``_commit_round``, ``_end_round``) in its
second run. What remains between the two is the bookkeeping a scheduled engine keeps in a
round that does not draft (the gate's choice and record, its statistics).
"""

import cProfile
import pstats
import sys
import time

from specd.worker.bench.groups import parse_groups
from specd.worker.bench.prompts import encode_prompts, read_prompt_file, select_rows
from specd.worker.engine import Engine, EngineConfig
from specd.worker.engine.api import GenerationRequest, SamplingParams
from specd.worker.engine.draft_gate import Choice
from specd.worker.engine.threads import serial_main_thread
from specd.worker.model import load_model

PHASES = ("_draft", "_verify_round", "_commit_round", "_end_round")


def main(dtype: str, concurrency: int) -> None:
    threads = serial_main_thread()
    loaded = load_model("smollm2-135m", "cpu", dtype)
    rows, _ = select_rows(read_prompt_file("worker/bench/prompts.jsonl"), concurrency, 0)
    prompts = encode_prompts(rows, loaded.tokenizer)
    engines = {}
    for name in ("plain", "semi-ar-scheduled"):
        group = parse_groups(name)[-1]
        config = EngineConfig(drafter=group.drafter, max_slots=concurrency, max_context=400,
                              threads=threads, cost_profile="none")
        engine = Engine(loaded, config, policy=group.policy(3))
        engine.core.gate.choose = lambda *a, **k: Choice(False, why="held shut")
        engines[name] = engine

    def requests() -> list[GenerationRequest]:
        params = SamplingParams(max_tokens=128, ignore_eos=True)
        return [GenerationRequest(p.token_ids, params) for p in prompts]

    for engine in engines.values():
        engine.generate(requests()[:4])  # warm-up
    for turn in range(2):
        order = list(engines.items())
        for name, engine in order if turn == 0 else reversed(order):
            profile = cProfile.Profile()
            began = time.perf_counter()
            profile.enable()
            engine.generate(requests())
            profile.disable()
            print(f"{name} run {turn + 1}: {time.perf_counter() - began:.3f} s")
            if turn == 1:
                stats = pstats.Stats(profile)
                phases = {f[2]: round(v[3], 3) for f, v in stats.stats.items() if f[2] in PHASES}
                print(f"  calls {stats.total_calls}, phases (cumulative s) {phases}")


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
