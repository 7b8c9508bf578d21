"""The bench's own engines at one concurrency, for the measurement scripts beside it.

``run_cells`` loads the target in DTYPE, takes the first LIMIT benchmark prompts and runs
``run_engine_groups`` over them (128 tokens, K=3, one measured step-cost table, the groups'
balanced order) in PASSES passes, as ``specd bench engine`` does.
"""

from typing import Any

import torch

from specd.worker.bench import engine_bench as bench
from specd.worker.bench.groups import parse_groups
from specd.worker.bench.prompts import encode_prompts, read_prompt_file, select_rows
from specd.worker.engine.threads import serial_main_thread
from specd.worker.model import load_model


def run_cells(dtype: str, concurrency: int, limit: int, passes: int, groups: str,
              on_cell: Any = None) -> dict[str, Any]:
    """Each group's Cell at ``concurrency``."""
    rows, _ = select_rows(read_prompt_file("worker/bench/prompts.jsonl"), limit, 0)
    torch.manual_seed(0)
    threads = serial_main_thread()
    loaded = load_model("smollm2-135m", "cpu", dtype)
    prompts = encode_prompts(rows, loaded.tokenizer)
    results = bench.run_engine_groups(loaded, parse_groups(groups), prompts, [concurrency], 128,
                                      3, engine_options={"threads": threads,
                                                         "cost_profile": "measure"},
                                      passes=passes, on_cell=on_cell)
    return {g: cells[concurrency] for g, cells in results.items()}
