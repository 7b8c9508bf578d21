"""Start-up profiling of the target's step cost against batched token count (the
hardware-aware part of Scheme B's scheduler)."""

from __future__ import annotations

import time
from collections.abc import Callable
from dataclasses import replace

import torch

from specd.worker.engine.kv_cache import KVCache
from specd.worker.engine.llama import LlamaRunner, Row
from specd.worker.engine.scheduler import CostTable

# rows of R requests verifying drafts: R in powers of two, each row 1..TOKENS_PER_ROW tokens
# (a single row: 1 + the longest draft a policy allows, k_max <= 16; more rows: drafts up to
# 7, the trained drafters' K; longer ones are priced by the last segment's slope)
ONE_ROW_TOKENS = 17
TOKENS_PER_ROW = 8
# fresh best-of timings of each padding's two sizes, after the choice
# (``CostTable.with_confirmed_padding``)
CONFIRM_REPEATS = 5
# dense where kernels are irregular (every size measured, padding can pick the cheaper one),
# then both sides of each multiple of 16 (for every row count, ``_row_totals``): CPU GEMM
# kernels work in 16-row tiles, so cost is a staircase (measured on the dev machine: 32
# tokens 101 ms, 33 tokens 119 ms; 64 -> 65: 162 -> 182 ms) and a table that only
# interpolates between 32 and 48 prices the 33rd token at a tenth of what it costs
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
    scheduler must see are measured in that shape). Then, for R = 1, 2, 4, ... rows, R rows
    carrying R, R + 1, ... tokens (``_row_totals``; ``CostTable.by_rows``: what a round of R
    requests verifying their drafts costs). A padding the timings chose (``CostTable.pad_to``)
    is kept only where fresh timings of its two sizes confirm the saving (``_confirm_padding``).

    Needs free slots in ``cache`` (run before serving); leaves the cache as it found it.
    Measures raw shapes (the runner's padding is off meanwhile); the caller installs the
    returned table's padding in the runner (``LlamaRunner.set_padding``).
    """
    saved_pad = runner.pad_to, runner.pad_to_one_row
    runner.pad_to, runner.pad_to_one_row = (), ()
    grid = [t for t in GRID if t <= max_tokens] or [1]
    max_rows = min(cache.free_slots, max(grid))
    if max_rows < 1:
        raise RuntimeError("cost profiling needs a free KV slot")
    context = max(0, min(context, cache.max_context // 2))
    slots = [cache.allocate() for _ in range(max_rows)]
    by_rows: list[tuple[int, CostTable]] = []
    try:
        def main_layout(total: int) -> list[int]:
            return _spread(total, min(max_rows, max(1, -(-total // tokens_per_row))))

        def timing(shapes: list[list[int]], times: int) -> list[float]:
            return _time_layouts(runner, cache, slots, shapes, context, times)

        seconds = timing([main_layout(t) for t in grid], repeats)
        rows = 1
        while rows <= max_rows:
            totals = _row_totals(rows, max_tokens)
            times = timing([_spread(t, rows) for t in totals], repeats)
            if len(times) >= 2:
                # a single row's padding is measured in its own shape (one row of 1, 2, 3,
                # ... tokens), past its own margin; more rows' totals start at R, so they
                # pad by the main table
                margin = CostTable.ONE_ROW_PAD_MARGIN
                table = CostTable.from_measurements(totals[: len(times)], times, margin)
                by_rows.append((rows, _confirm_padding(table, lambda t: [t], timing, margin)
                                if rows == 1 else replace(table, pad_to=())))
            rows *= 2
        table = CostTable.from_measurements(grid[: len(seconds)], seconds)
        table = _confirm_padding(table, main_layout, timing)
    finally:
        runner.pad_to, runner.pad_to_one_row = saved_pad
        for s in slots:
            cache.release(s)
    return replace(table, by_rows=tuple(by_rows))


def _confirm_padding(table: CostTable, layout: Callable[[int], list[int]],
                     timing: Callable[[list[list[int]], int], list[float]],
                     margin: float = CostTable.PAD_MARGIN) -> CostTable:
    """``table`` keeping only the paddings that fresh timings of their two sizes confirm."""
    sizes = sorted({t for n, m in zip(table.tokens, table.pad_to, strict=False) if n != m
                    for t in (n, m)})
    if not sizes:
        return table
    seconds = timing([layout(t) for t in sizes], CONFIRM_REPEATS)
    return table.with_confirmed_padding(dict(zip(sizes, seconds, strict=False)), margin)


def _row_totals(rows: int, max_tokens: int) -> list[int]:
    """Token totals to time for a forward of ``rows`` requests: every row 1, 2, ... tokens
    (up to ONE_ROW_TOKENS for one row, TOKENS_PER_ROW for more), and the grid's points in
    between, spread over the rows (``_spread``: the shape of a busy round, one token per row
    and a few rows carrying drafts). The in-between points catch the tile steps: one drafted
    token on top of 16 one-token rows crosses a kernel tile and costs many times what a
    table of whole multiples (16, 32, ...) interpolates for it."""
    per_row = ONE_ROW_TOKENS if rows == 1 else TOKENS_PER_ROW
    whole = {rows * u for u in range(1, per_row + 1)}
    between = {t for t in GRID if rows < t < rows * per_row}
    return sorted(t for t in whole | between if t <= max_tokens)


def _spread(total: int, n_rows: int) -> list[int]:
    """``total`` tokens over ``n_rows`` rows, as evenly as possible."""
    return [total // n_rows + (1 if r < total % n_rows else 0) for r in range(n_rows)]


def forward_timer(runner: LlamaRunner, cache: KVCache, slots: list[int],
                  context: int) -> Callable[[list[int]], float]:
    """A function timing one forward of a layout (tokens per row, rows on ``slots`` after
    ``context`` cached tokens), in seconds; the cache is left at ``context`` per slot."""
    def forward(per: list[int]) -> float:
        for s in slots[: len(per)]:
            cache.lengths[s] = context
        rows = [Row(s, [1] * n, "all") for s, n in zip(slots, per, strict=False)]
        _sync(runner.device)
        t0 = time.perf_counter()
        runner.forward(cache, rows)
        _sync(runner.device)
        return time.perf_counter() - t0

    return forward


def _time_layouts(runner: LlamaRunner, cache: KVCache, slots: list[int],
                  layouts: list[list[int]], context: int, repeats: int) -> list[float]:
    """Best-of-``repeats`` seconds of one forward per layout (tokens per row, rows on
    ``slots`` after ``context`` cached tokens), for the layouts the cache can hold (a
    prefix of ``layouts``). The repeats go round the layouts in turn (after one warm-up
    forward): timed one size after another, a machine whose speed drifts over the seconds
    this takes (the shared dev CPU's does, by 10-30 % over minutes) would tilt the table, and
    the scheduler acts on differences of a few percent."""
    layouts = layouts[: next((i for i, per in enumerate(layouts)
                              if context + max(per) > cache.max_context), len(layouts))]
    forward = forward_timer(runner, cache, slots, context)
    if layouts:
        forward(layouts[0])
    best = [float("inf")] * len(layouts)
    for _ in range(repeats):
        for i, per in enumerate(layouts):
            best[i] = min(best[i], forward(per))
    return best
