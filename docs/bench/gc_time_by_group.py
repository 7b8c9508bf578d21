"""Time Python's garbage collector per bench group (one short run at one request).

    .venv/bin/python docs/bench/gc_time_by_group.py worker/bench/prompts.jsonl 4

Runs plain, fixed K=3 and Scheme B over a spread sample of N prompts at c=1 (128 tokens,
float32, one pass of the bench's own engines) and prints, per group, its seconds, tau and the
collections seen by ``gc.callbacks`` (count and seconds per generation). A check on one
suspect for a whole round running slower in one group (docs/bench/RESULTS.md).
"""

import gc
import json
import sys
import time
from typing import Any

import torch

from specd.worker.bench import engine_bench as bench
from specd.worker.bench.groups import parse_groups
from specd.worker.bench.prompts import encode_prompts, read_prompt_file, select_rows
from specd.worker.engine.threads import serial_main_thread
from specd.worker.model import load_model

current: dict[str, str | None] = {"group": None}
stats: dict[str | None, dict[str, list[Any]]] = {}
started: dict[str, float] = {}


def on_gc(phase: str, info: dict[str, Any]) -> None:
    if phase == "start":
        started["t"] = time.perf_counter()
        return
    seen = stats.setdefault(current["group"], {"n": [0, 0, 0], "seconds": [0.0, 0.0, 0.0]})
    seen["n"][info["generation"]] += 1
    seen["seconds"][info["generation"]] += time.perf_counter() - started["t"]


def on_cell(name: str, concurrency: int) -> None:
    current["group"] = name


def main(prompt_file: str, sample: int) -> None:
    gc.callbacks.append(on_gc)
    rows, _ = select_rows(read_prompt_file(prompt_file), 0, sample)
    torch.manual_seed(0)
    threads = serial_main_thread()
    loaded = load_model("smollm2-135m", "cpu", "float32")
    prompts = encode_prompts(rows, loaded.tokenizer)
    groups = parse_groups("semi-ar-fixed,semi-ar-scheduled")  # plain is added
    results = bench.run_engine_groups(loaded, groups, prompts, [1], 128, 3, on_cell=on_cell,
                                      engine_options={"threads": threads,
                                                      "cost_profile": "measure"})
    print(json.dumps({g: {"seconds": cells[1].seconds, "tau": cells[1].summary()["tau"],
                          "gc": stats.get(g)} for g, cells in results.items()}, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]))
