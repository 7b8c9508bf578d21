"""Does a verify forward's cost depend on how its tokens sit on the rows?

R one-token rows plus some drafts, the drafts spread one per row (the shape the start-up cost
profile times, ``cost._spread``) or three per row (the shape scheduled verification makes: a
few confident rows verify K drafts, the rest none). Attention runs the rows as one padded call
(``llama._Group``), so every row pays for the longest one.

    python docs/bench/verify_shape_cost.py [ROWS]
"""

from __future__ import annotations

import sys
import time

import torch

from specd.worker.engine.llama import LlamaRunner, Row
from specd.worker.model import load_model


def main() -> None:
    torch.set_num_threads(2)
    rows = int(sys.argv[1]) if len(sys.argv) > 1 else 32
    runner = LlamaRunner(load_model("smollm2-135m", "cpu", "float32").model)
    cache = runner.new_cache(rows, 512)

    def layout(extra: int, per_row: int) -> list[int]:
        counts = [1] * rows
        i = 0
        while extra > 0:
            add = min(per_row, extra)
            counts[i] += add
            extra -= add
            i += 1
        return counts

    def forward(counts: list[int]) -> float:
        for s in range(rows):
            cache.lengths[s] = 200
        t0 = time.perf_counter()
        runner.forward(cache, [Row(s, [1] * n, "all") for s, n in enumerate(counts)])
        return time.perf_counter() - t0

    cases = [("plain", [1] * rows)]
    for extra in (8, 16, 21, 32):
        cases += [(f"+{extra} spread 1/row", layout(extra, 1)),
                  (f"+{extra} as 3/row", layout(extra, 3))]
    forward(cases[0][1])
    best = {name: float("inf") for name, _ in cases}
    for _ in range(7):
        for name, counts in cases:  # round-robin: a drifting machine cannot tilt one case
            best[name] = min(best[name], forward(counts))
    for name, counts in cases:
        print(f"{name:20} tokens {sum(counts):3d} longest row {max(counts)} "
              f"{best[name] * 1e3:7.1f} ms {best[name] / best['plain']:5.2f}x plain")


if __name__ == "__main__":
    main()
