"""What a decode forward pays for the slots its rows sit on.

One-token rows over ``CONTEXT`` cached tokens, on slot layouts a continuous-batching engine
meets: a packed batch (``KVCache.compact`` keeps the running requests on 0..n-1), every other
slot (requests finished out of order, no compaction), and a packed batch minus the few rows
that verify drafts this round (those attend apart: ``LlamaRunner._attention_groups``). Each
layout is timed with attention reading the cache the engine's way (``_Group.build``: in
place over a contiguous range, a masked dummy query in each gap when the gaps are no more
than the rows) and with every row's keys and values copied out (the rule before). Best of 7,
the cases round-robin so a drifting machine cannot tilt one; ratios to the packed batch of
the same row count, timed in the same run.

    python docs/bench/slot_layout_cost.py [DTYPE] [ROWS] [CONTEXT]
"""

from __future__ import annotations

import sys
import time

import torch

from specd.worker.engine.llama import LlamaRunner, Row, _Group
from specd.worker.model import load_model


def copied(slots: list[int], starts: list[int], counts: list[int], offsets: list[int],
           dev: torch.device) -> _Group:
    """Every row's keys and values copied out of the cache (no in-place read of a range)."""
    if slots == list(range(slots[0], slots[0] + len(slots))):
        return _Group._make(slice(slots[0], slots[0] + len(slots)), starts, counts, offsets,
                            [True] * len(slots), dev)
    return _Group._make(torch.tensor(slots, device=dev), starts, counts, offsets,
                        [True] * len(slots), dev)


def main() -> None:
    torch.set_num_threads(2)
    dtype = sys.argv[1] if len(sys.argv) > 1 else "float32"
    rows = int(sys.argv[2]) if len(sys.argv) > 2 else 32
    context = int(sys.argv[3]) if len(sys.argv) > 3 else 250
    runner = LlamaRunner(load_model("smollm2-135m", "cpu", dtype).model)
    cache = runner.new_cache(2 * rows + 8, context + 8)
    half = rows // 2
    layouts = {
        f"packed {rows}": list(range(rows)),
        f"{rows} around 2 gaps (verify rows)": [s for s in range(rows + 2) if s not in (5, rows // 2)],
        f"{rows} around {rows // 8} gaps": [s for s in range(rows + rows // 8)
                                                       if s % 9 != 4][:rows],
        f"packed {half}": list(range(half)),
        f"{half} on every other slot": list(range(0, rows, 2)),
    }
    rules = {"engine": _Group.build, "copied": copied}
    best: dict[tuple[str, str], float] = {}
    for _ in range(7):
        for rule, build in rules.items():
            _Group.build = staticmethod(build)  # type: ignore[method-assign]
            for name, slots in layouts.items():
                for s in slots:
                    cache.lengths[s] = context
                t0 = time.perf_counter()
                runner.forward(cache, [Row(s, [1], "last") for s in slots])
                dt = time.perf_counter() - t0
                best[rule, name] = min(best.get((rule, name), dt), dt)
    print(f"{dtype}, context {context}: ms (x the packed batch of as many rows)")
    print("layout | rows | engine | copied")
    for name, slots in layouts.items():
        base = best["engine", f"packed {len(slots)}" if len(slots) in (rows, half) else name]
        cells = [f"{1e3 * best[r, name]:.1f} ({best[r, name] / base:.2f}x)" for r in rules]
        print(f"{name} | {len(slots)} | " + " | ".join(cells))


if __name__ == "__main__":
    main()
