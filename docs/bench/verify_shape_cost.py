"""Does a verify forward's cost depend on how its tokens sit on the rows?

R one-token rows plus some drafts, the drafts spread one per row (the shape the start-up cost
profile times, ``cost._spread``) or three per row (the shape scheduled verification makes: a
few confident rows verify K drafts, the rest none), each with attention grouped two ways: the
engine's (``LlamaRunner._attention_groups``: one-token rows apart from rows verifying drafts)
and one padded call for every short row (the rule before it, where every row paid for the
longest row's queries). Best of 7, the cases round-robin so a drifting machine cannot tilt one.

    python docs/bench/verify_shape_cost.py [ROWS] [CONTEXT]
"""

from __future__ import annotations

import sys
import time

import torch

from specd.worker.engine.llama import SHORT_ROW, LlamaRunner, Row, _Group
from specd.worker.model import load_model


def one_padded_call(runner: LlamaRunner, rows: list[Row], starts: list[int],
                    counts: list[int]) -> list[_Group]:
    """The grouping before the split: every short row in one padded SDPA call."""
    offsets = [sum(counts[:i]) for i in range(len(counts))]
    short = sorted((i for i, n in enumerate(counts) if n <= SHORT_ROW), key=lambda i: rows[i].slot)
    groups = [_Group.build([rows[i].slot for i in short], [starts[i] for i in short],
                           [counts[i] for i in short], [offsets[i] for i in short],
                           runner.device)] if short else []
    return groups + [_Group.build([rows[i].slot], [starts[i]], [n], [offsets[i]], runner.device)
                     for i, n in enumerate(counts) if n > SHORT_ROW]


def layout(rows: int, extra: int, per_row: int) -> list[int]:
    counts = [1] * rows
    i = 0
    while extra > 0:
        add = min(per_row, extra)
        counts[i] += add
        extra -= add
        i += 1
    return counts


def main() -> None:
    torch.set_num_threads(2)
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 32
    context = int(sys.argv[2]) if len(sys.argv) > 2 else 200
    runner = LlamaRunner(load_model("smollm2-135m", "cpu", "float32").model)
    cache = runner.new_cache(rows, context + 64)
    split = LlamaRunner._attention_groups

    def forward(counts: list[int], grouping: object) -> tuple[float, torch.Tensor]:
        LlamaRunner._attention_groups = grouping  # type: ignore[method-assign]
        for s in range(rows):
            cache.lengths[s] = context
        t0 = time.perf_counter()
        out = runner.forward(cache, [Row(s, [1] * n, "all") for s, n in enumerate(counts)])
        return time.perf_counter() - t0, out.logits

    cases = [("plain", [1] * rows)]
    for extra in (e for e in (1, 3, 8, 16, 21, 32) if e <= rows):  # spread: one per row
        spread, dense = layout(rows, extra, 1), layout(rows, extra, 3)
        cases.append((f"+{extra} spread 1/row", spread))
        if dense != spread:  # +1 is one row of 2 either way
            cases.append((f"+{extra} as 3/row", dense))
    ways = {"split": split, "one call": one_padded_call}
    forward(cases[0][1], split)
    best = {(name, way): float("inf") for name, _ in cases for way in ways}
    max_diff = 0.0
    for _ in range(7):
        for name, counts in cases:
            seconds, ref = forward(counts, split)
            best[name, "split"] = min(best[name, "split"], seconds)
            seconds, logits = forward(counts, one_padded_call)
            best[name, "one call"] = min(best[name, "one call"], seconds)
            max_diff = max(max_diff, (logits - ref).abs().max().item())
    LlamaRunner._attention_groups = split  # type: ignore[method-assign]
    plain = best["plain", "split"]
    print(f"{rows} rows at context {context}; ms, and x plain (one-token rows only, split)")
    print(f"{'case':18} tokens longest {'split':>15} {'one call':>15} split/one")
    for name, counts in cases:
        a, b = best[name, "split"], best[name, "one call"]
        print(f"{name:18} {sum(counts):6d} {max(counts):7d} {a * 1e3:7.1f} ({a / plain:4.2f}x) "
              f"{b * 1e3:7.1f} ({b / plain:4.2f}x) {a / b:8.3f}")
    print(f"largest logit difference between the two groupings: {max_diff:.2e}")


if __name__ == "__main__":
    main()
