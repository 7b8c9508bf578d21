"""Start-up profiling of the target's step cost against batched token count (the
hardware-aware part of Scheme B's scheduler)."""

from __future__ import annotations

import time

import torch

from specd.worker.engine.kv_cache import KVCache
from specd.worker.engine.llama import LlamaRunner, Row
from specd.worker.engine.scheduler import CostTable

# dense where kernels are irregular (every size measured, padding can pick the cheaper one),
# then both sides of each multiple of 16: CPU GEMM kernels work in 16-row tiles, so cost is a
# staircase (measured on the dev machine: 32 tokens 101 ms, 33 tokens 119 ms; 64 -> 65:
# 162 -> 182 ms) and a table that only interpolates between 32 and 48 prices the 33rd token
# at a tenth of what it costs
GRID = (*range(1, 18), 24, *(t for m in (32, 48, 64, 96, 128, 192, 256) for t in (m, m + 1)))


def _sync(device: torch.device) -> None:
    if device.type == "cuda":
        torch.cuda.synchronize(device)


def measure_costs(runner: LlamaRunner, cache: KVCache, max_tokens: int, tokens_per_row: int = 1,
                  context: int = 128, repeats: int = 3) -> CostTable:
    """Time verify-shaped forwards (rows of ``tokens_per_row`` tokens after ``context`` cached
    tokens, as many rows as free slots allow, the rest spread over them) for each grid size up
    to ``max_tokens``; the minimum of ``repeats`` (interference only adds time); made monotone.
    One token per row by default: a busy batch is many one-token rows plus a few drafts, and
    per-row work makes 32 rows of 1 token dearer than 6 rows of 5-6 (the staircase steps the
    scheduler must see are measured in that shape).

    Needs free slots in ``cache`` (run before serving); leaves the cache as it found it.
    Measures raw shapes (the runner's padding is off meanwhile); the caller installs the
    returned table's ``pad_to`` in the runner.
    """
    saved_pad, runner.pad_to = runner.pad_to, ()
    grid = [t for t in GRID if t <= max_tokens] or [1]
    max_rows = min(cache.free_slots, max(grid))
    if max_rows < 1:
        raise RuntimeError("cost profiling needs a free KV slot")
    context = max(0, min(context, cache.max_context // 2))
    slots = [cache.allocate() for _ in range(max_rows)]
    seconds: list[float] = []
    try:
        for i, total in enumerate(grid):
            n_rows = min(max_rows, max(1, -(-total // tokens_per_row)))
            per = [total // n_rows + (1 if r < total % n_rows else 0) for r in range(n_rows)]
            if context + max(per) > cache.max_context:
                grid = grid[:i]
                break
            times = []
            for rep in range(repeats + (1 if i == 0 else 0)):  # one warm-up forward first
                for s in slots[:n_rows]:
                    cache.lengths[s] = context
                rows = [Row(s, [1] * n, "all") for s, n in zip(slots, per, strict=False)]
                _sync(runner.device)
                t0 = time.perf_counter()
                runner.forward(cache, rows)
                _sync(runner.device)
                if not (i == 0 and rep == 0):
                    times.append(time.perf_counter() - t0)
            seconds.append(min(times))
    finally:
        runner.pad_to = saved_pad
        for s in slots:
            cache.release(s)
    return CostTable.from_measurements(grid[: len(seconds)], seconds)
