"""``run_engine_groups``: engine groups run interleaved by concurrency on the real model, and
lossless groups match plain decoding cell by cell."""

from __future__ import annotations

import pytest

from specd.worker.bench.engine_bench import mark_matches, report, run_engine_groups
from specd.worker.bench.groups import parse_groups
from specd.worker.bench.prompts import BenchPrompt

pytestmark = pytest.mark.model


def test_groups_run_interleaved_and_match_plain(target, chat_prompt_ids, same_or_near_tie):
    prompts = [BenchPrompt(chat_prompt_ids(text), "chat", text) for text in
               ("Name three colours.", "Count from one to six.", "What is a list in Python?")]
    groups = parse_groups("plain,ngram,semi-ar-scheduled")
    seen: list[tuple[str, int]] = []
    results = run_engine_groups(target, groups, prompts, [1, 2], max_tokens=10, k=3,
                                on_cell=lambda g, c: seen.append((g, c)),
                                engine_options={"cost_profile": "none"})
    names = [g.name for g in groups]
    # all groups at c=1, then all at c=2, the second pass in reverse order
    assert seen == [(n, 1) for n in names] + [(n, 2) for n in reversed(names)]
    starts = {(g, c): cell.started_s for g, cells in results.items() for c, cell in cells.items()}
    assert max(starts[(n, 1)] for n in names) < min(starts[(n, 2)] for n in names)
    mark_matches(results)
    doc = report("smollm2-135m", results, {})
    for name in names:
        for conc in ("1", "2"):
            assert doc["groups"][name][conc]["output_tokens"] == 30  # ignore_eos: max_tokens each
        assert doc["groups"][name]["1"]["match_plain"] is True, name  # batch 1: lossless
        for p, out, ref in zip(prompts, results[name][2].outputs, results["plain"][2].outputs,
                               strict=True):
            same_or_near_tie(p.token_ids, out, ref)  # batched: only logit near-ties may differ
    sched = doc["groups"]["semi-ar-scheduled"]["1"]
    assert sched["tau"] > 1.0 and sched["drafter_memory_mb"] > 0
