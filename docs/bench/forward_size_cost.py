"""What a target forward costs by token count and rows, timed robustly: median and best of
REPEATS forwards per layout, the layouts round-robin so a drifting machine tilts none.

The start-up cost table takes the best of 3 and pads a forward up to a size timed cheaper;
where sizes differ by a few percent that choice is a draw. This measures the differences
the padding acts on: a lone row of 4 tokens against 5-17 (Scheme B's and fixed K=3's verify
at one request), 4 rows of 4 against 17 tokens (c=4), 16 one-token rows against 17 (c=16).

    python docs/bench/forward_size_cost.py [REPEATS] [CONTEXT]
"""

from __future__ import annotations

import statistics
import sys

import torch

from specd.worker.engine.cost import forward_timer
from specd.worker.engine.llama import LlamaRunner
from specd.worker.model import load_model

LAYOUTS = {  # name: tokens per row
    **{f"1x{n}": [n] for n in (1, 4, 5, 7, 11, 16, 17, 20)},
    "4x3": [3] * 4, "4x3+1": [4, 3, 3, 3], "4x4": [4] * 4, "4x4+1": [5, 4, 4, 4],
    "2x8": [8, 8], "2x8+1": [9, 8],
    "15x1": [1] * 15, "16x1": [1] * 16, "16x1+1": [2] + [1] * 15,
    "12x1+4": [1] * 12 + [4], "12x1+5": [1] * 12 + [5],
    "32x1": [1] * 32, "32x1+1": [2] + [1] * 31,
}


def main() -> None:
    repeats = int(sys.argv[1]) if len(sys.argv) > 1 else 15
    context = int(sys.argv[2]) if len(sys.argv) > 2 else 128
    loaded = load_model("smollm2-135m", "cpu", "float32")
    runner = LlamaRunner(loaded.model)
    cache = runner.new_cache(40, context + 64)
    slots = [cache.allocate() for _ in range(40)]
    timer = forward_timer(runner, cache, slots, context)  # the start-up table's own timing

    def forward(per: list[int]) -> float:
        with torch.inference_mode():
            return timer(per) * 1e3

    for per in LAYOUTS.values():  # warm-up: every shape once
        forward(per)
    samples: dict[str, list[float]] = {name: [] for name in LAYOUTS}
    for _ in range(repeats):
        for name, per in LAYOUTS.items():
            samples[name].append(forward(per))
    base = statistics.median(samples["1x4"])
    print(f"{'layout':8} {'tokens':>6} {'median ms':>10} {'best ms':>8} {'x 1x4':>6}")
    for name, v in samples.items():
        med = statistics.median(v)
        print(f"{name:8} {sum(LAYOUTS[name]):6d} {med:10.2f} {min(v):8.2f} {med / base:6.3f}")


if __name__ == "__main__":
    main()
