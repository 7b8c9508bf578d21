"""The full-batch rate of a bench run two ways: the client's window it was until 2026-12-08,
and the engine's full rounds it is since.

    .venv/bin/python docs/bench/full_window.py bfloat16 32 40 2 window.json \
        semi-ar-scheduled,plain-twin

Runs the bench's own engines (``run_engine_groups``: the first LIMIT benchmark prompts, 128
tokens, K=3, the groups' balanced order) with every request's start, every streamed event and
every engine round time-stamped, then reads, per group and slice, the window
``full_batch_tokens_per_s`` was taken over until 2026-12-08 (from the first wave's last first
token to the first end once no prompt was left to start): how long it is, its tokens, the
requests that ended and were admitted inside it, its rounds by row count and kind, and its rate
beside the rate of the engine's full rounds (all C rows decoding, no prefill: ``full_batch``,
what the bench reports now). Per group, the median over slices of both
(docs/bench/RESULTS.md).
"""

import json
import statistics
import sys
import time
from collections import Counter
from itertools import pairwise
from typing import Any

from bench_cells import run_cells

from specd.worker.bench import engine_bench as bench
from specd.worker.bench.drafting_ledger import Round

slices: list[dict[str, Any]] = []
drive = bench._drive


class Logged:
    """The engine as ``_drive`` sees it, with each request's start and each streamed event
    time-stamped."""

    def __init__(self, engine: Any, events: list[tuple[float, int, int, bool]],
                 starts: list[float]) -> None:
        self.engine, self.events, self.starts = engine, events, starts

    async def submit(self, request: Any) -> Any:
        rid = len(self.starts)
        self.starts.append(time.perf_counter())
        async for event in self.engine.submit(request):
            self.events.append((time.perf_counter(), rid, len(event.token_ids), event.finished))
            yield event


async def logged_drive(engine: Any, prompts: Any, concurrency: int, *args: Any,
                       **kwargs: Any) -> Any:
    events: list[tuple[float, int, int, bool]] = []
    starts: list[float] = []
    rounds: list[tuple[float, int, str, float, int, int]] = []

    def listen(st: Any) -> None:
        rounds.append((time.perf_counter(), st.rows, st.kind, st.seconds, st.emitted,
                       st.prefill_tokens))

    engine.core.round_listeners.append(listen)
    try:
        driven = await drive(Logged(engine, events, starts), prompts, concurrency, *args,
                             **kwargs)
        await engine.stop()  # the last round's listeners
    finally:
        engine.core.round_listeners.remove(listen)
    slices.append(window(events, starts, rounds, concurrency))
    return driven


def window(events: list[tuple[float, int, int, bool]], starts: list[float],
           rounds: list[tuple[float, int, str, float, int, int]],
           concurrency: int) -> dict[str, Any]:
    first_token: dict[int, float] = {}
    for t, rid, n, _ in events:
        if n and rid not in first_token:
            first_token[rid] = t
    since = sorted(first_token.values())[:concurrency][-1]
    ends = sorted(t for t, _, _, fin in events if fin)
    until = next((t for t in ends if t > starts[-1]), ends[-1])
    tokens = sum(n for t, _, n, _ in events if since < t <= until)
    inside = [r for r in rounds if since < r[0] <= until]
    later = rounds[1:]  # each with its wall time from the round before
    tokens_full, seconds_full = bench.full_batch(
        [Round(r[1], r[2] == "speculative", r[3], r[4], not r[5]) for r in later],
        [b[0] - a[0] for a, b in pairwise(rounds)], concurrency)
    return {
        "window_s": until - since, "window_tokens": tokens,
        "window_rate": tokens / (until - since),
        "ends_inside": sum(since < t <= until for t in ends),
        "admitted_inside": sum(since < t <= until for rid, t in first_token.items()
                               if rid >= concurrency),
        "rounds_inside": dict(Counter(f"{r[1]}{'p' if r[5] else ''}:{r[2][:4]}"
                                      for r in inside)),
        "full_rounds": sum(r[1] == concurrency and not r[5] for r in later),
        "full_round_rate": tokens_full / seconds_full,
    }


def main(dtype: str, concurrency: int, limit: int, passes: int, out: str,
         groups: str = "semi-ar-scheduled") -> None:
    bench._drive = logged_drive
    names: list[str] = []
    cells = run_cells(dtype, concurrency, limit, passes, groups,
                      on_cell=lambda name, _: names.append(name))
    for name, sl in zip(names, slices, strict=True):
        sl["group"] = name
    summary = {g: {"bench": cell.summary()["full_batch_tokens_per_s"],
                   **{key: statistics.median(sl[key] for sl in slices if sl["group"] == g)
                      for key in ("window_rate", "full_round_rate")}}
               for g, cell in cells.items()}
    with open(out, "w") as f:
        json.dump({"full_batch_tokens_per_s": summary, "slices": slices}, f, indent=1)
    for sl in slices:
        print(json.dumps(sl))
    print(json.dumps(summary, indent=1))


if __name__ == "__main__":
    main(sys.argv[1], int(sys.argv[2]), int(sys.argv[3]), int(sys.argv[4]), sys.argv[5],
         *sys.argv[6:])
