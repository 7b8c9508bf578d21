"""Trace Scheme B's draft gate through a bench run, and price its probes two ways.

    .venv/bin/python docs/bench/gate_trace.py run bfloat16 32 40 4 trace.json \
        semi-ar-fixed,semi-ar-scheduled,plain-twin
    .venv/bin/python docs/bench/gate_trace.py price trace.json

``run DTYPE C LIMIT PASSES OUT [GROUPS]``: the bench's own engines (``run_engine_groups``, the
first LIMIT benchmark prompts, 128 tokens, K=3, the groups' balanced order) with every
``DraftGate.choose`` and ``DraftGate.record`` of the scheduled engine written to OUT: the
choice and why, the measured ratio, each measured round's rows, kind, seconds and tokens.

``price OUT``: per stretch of the scheduled engine's rounds (a slice; a gap of 2 s between
rounds starts a new one): its rounds, drafting rounds, the drafting ledger (each drafting
round against the 8 nearest plain rounds of its row count: ``drafting_ledger``), and the
plain probes priced per committed token against the drafting rounds of their row count just
before them (4, as ``DraftOutcomes`` did before 2026-12-07) and around them (2 before, 2
after, as it does since), as geometric means over the probes both can price. A check of the gate's measurement against a
trend in round time (docs/bench/RESULTS.md).
"""

import json
import math
import sys
import time
from typing import Any

from bench_cells import run_cells

from specd.worker.bench.drafting_ledger import Round, drafting_ledger
from specd.worker.engine import draft_gate

trace: list[dict[str, Any]] = []


def traced(gate_class: Any) -> None:
    """Wrap the gate's choose and record to append to ``trace``."""
    choose, record = gate_class.choose, gate_class.record

    def traced_choose(self: Any, batch_policy: Any, policies: Any, base_tokens: int, rows: int,
                      measured: bool) -> Any:
        c = choose(self, batch_policy, policies, base_tokens, rows, measured)
        trace.append({"ev": "choose", "draft": c.draft, "probe": c.probe, "why": c.why,
                      "ratio": self.outcomes.measured_ratio(draft_gate.bucket(len(policies)))})
        return c

    def traced_record(self: Any, o: Any) -> None:
        record(self, o)
        trace.append({"ev": "record", "n": o.rows, "drafted": o.drafted, "s": o.seconds,
                      "committed": o.committed, "verified": o.verified,
                      "unit": float(self.costs.cost(o.rows)) / o.rows, "t": time.perf_counter()})

    gate_class.choose, gate_class.record = traced_choose, traced_record


def run(dtype: str, concurrency: int, limit: int, passes: int, out: str,
        groups: str = "semi-ar-scheduled") -> None:
    traced(draft_gate.DraftGate)
    cells = run_cells(dtype, concurrency, limit, passes, groups)
    full = {g: cell.summary()["full_batch_tokens_per_s"] for g, cell in cells.items()}
    with open(out, "w") as f:
        json.dump({"full_batch_tokens_per_s": full, "trace": trace}, f)
    print(json.dumps(full, indent=1))


def geomean(values: list[float]) -> float | None:
    return math.exp(sum(map(math.log, values)) / len(values)) if values else None


def per_token(rounds: list[dict[str, Any]]) -> float:
    """Cost per committed token, in the cost table's plain units."""
    return sum(r["s"] / r["unit"] for r in rounds) / sum(r["committed"] for r in rounds)


def price(path: str) -> None:
    with open(path) as f:
        events = json.load(f)["trace"]
    rounds, choice = [], None
    for e in events:
        if e["ev"] == "choose":
            choice = e
        else:
            rounds.append({**e, "probe": bool(choice and choice["probe"])})
            choice = None
    stretches: list[list[dict[str, Any]]] = [[]]
    for r in rounds:
        if stretches[-1] and r["t"] - stretches[-1][-1]["t"] > 2.0:
            stretches.append([])
        stretches[-1].append(r)
    for k, s in enumerate(stretches):
        # the trace holds only measured rounds: no prefill chunk in any of them
        ledger = drafting_ledger([Round(r["n"], r["drafted"], r["s"], r["committed"], True)
                                  for r in s])
        before_only, around = [], []
        for i, r in enumerate(s):
            if r["drafted"] or not r["probe"]:
                continue
            before = [x for x in s[:i] if x["drafted"] and x["n"] == r["n"]]
            after = [x for x in s[i + 1:] if x["drafted"] and x["n"] == r["n"]][:2]
            if len(before) >= 4 and len(after) == 2:  # the same probes both ways
                before_only.append(per_token([r]) / per_token(before[-4:]))
                around.append(per_token([r]) / per_token(before[-2:] + after))
        print(json.dumps({"stretch": k, "rounds": len(s),
                          "drafting_rounds": sum(r["drafted"] for r in s),
                          "ledger_share": ledger.excess_share(),
                          "plain_probes_vs_drafting_before": [len(before_only),
                                                              geomean(before_only)],
                          "plain_probes_vs_drafting_around": [len(around), geomean(around)]}))


if __name__ == "__main__":
    if sys.argv[1] == "run":
        run(sys.argv[2], int(sys.argv[3]), int(sys.argv[4]), int(sys.argv[5]), sys.argv[6],
            *sys.argv[7:])
    else:
        price(sys.argv[2])
