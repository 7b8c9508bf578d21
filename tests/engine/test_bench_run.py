"""``run_engine_groups``: engine groups run interleaved by concurrency on the real model, and
lossless groups match plain decoding cell by cell."""

from __future__ import annotations

import pytest

from specd.worker.bench.engine_bench import mark_matches, report, run_engine_groups
from specd.worker.bench.groups import parse_groups
from specd.worker.bench.prompts import BenchPrompt
from specd.worker.bench.run_order import group_orders

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
    # all groups at c=1 in their own order, then all at c=2 in the design's next order, which
    # does not start with the group that ended the first
    second = [names[i] for i in group_orders(len(names))[1]]
    assert seen == [(n, 1) for n in names] + [(n, 2) for n in second]
    assert sorted(second) == sorted(names) and second[0] != names[-1]
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
    # every round reached the drafting ledger: plain's never drafted, the scheduled group's did
    ledgers = {name: results[name][1].ledger for name in ("plain", "semi-ar-scheduled")}
    assert ledgers["plain"].drafted == 0 and ledgers["plain"].seconds > 0
    assert ledgers["semi-ar-scheduled"].drafted > 0, ledgers
    for name in names:  # one at a time: all but each prefill's token; at 2 the third drains
        assert results[name][1].full_tokens == [27], (name, results[name][1].full_tokens)
        assert 0 < results[name][2].full_tokens[0] < 27, name
        cell = results[name][2]  # full rounds' wall time: inside the slice's
        assert 0 < cell.full_seconds[0] < cell.seconds, name


def test_min_seconds_repeats_passes_and_reports_the_median(target, chat_prompt_ids, monkeypatch):
    from specd.worker.bench import engine_bench

    monkeypatch.setattr(engine_bench, "MAX_PASSES", 3)
    prompts = [BenchPrompt(chat_prompt_ids("Name two fruits."), "chat", "Name two fruits.")]
    groups = parse_groups("plain,ngram")
    seen: list[tuple[str, int]] = []
    results = run_engine_groups(target, groups, prompts, [1], max_tokens=6, k=3,
                                on_cell=lambda g, c: seen.append((g, c)),
                                engine_options={"cost_profile": "none"}, min_seconds=1e9)
    # never long enough: MAX_PASSES passes, the order of two groups alternating
    assert seen == [("plain", 1), ("ngram", 1), ("ngram", 1), ("plain", 1), ("plain", 1),
                    ("ngram", 1)]
    cell = results["plain"][1]
    assert len(cell.pass_seconds) == 3 and cell.seconds == pytest.approx(sum(cell.pass_seconds))
    assert len(cell.per_request_tokens_per_s) == 3 and len(cell.outputs) == 1
    summary = cell.summary()
    assert summary["passes_tokens_per_s"] == [round(6 / s, 3) for s in cell.pass_seconds]
    assert summary["tokens_per_s"] == pytest.approx(sorted(6 / s for s in cell.pass_seconds)[1])


def test_passes_sets_the_number_of_repeats_without_min_seconds(target, chat_prompt_ids):
    prompts = [BenchPrompt(chat_prompt_ids("Name two fruits."), "chat", "Name two fruits.")]
    seen: list[tuple[str, int]] = []
    results = run_engine_groups(target, parse_groups("plain"), prompts, [1, 2], max_tokens=4,
                                k=3, on_cell=lambda g, c: seen.append((g, c)),
                                engine_options={"cost_profile": "none"}, passes=2)
    # two passes at each concurrency, though no --min-seconds asks for any
    assert seen == [("plain", 1), ("plain", 1), ("plain", 2), ("plain", 2)]
    assert [len(results["plain"][c].pass_seconds) for c in (1, 2)] == [2, 2]


def test_add_pass_sums_counters_and_keeps_the_first_outputs():
    from specd.worker.bench.engine_bench import Cell

    first = Cell([[1, 2]], 2.0, [1.0], rounds=2, accepted=1, phase_seconds={"verify": 1.5})
    first.add_pass(Cell([[1, 3]], 1.0, [2.0], rounds=3, accepted=3,
                        phase_seconds={"verify": 0.5, "draft": 0.2}))
    first.add_pass(Cell([[1, 2]], 4.0, [0.5], rounds=1, accepted=0))
    assert first.outputs == [[1, 2]] and first.pass_seconds == [2.0, 1.0, 4.0]
    assert (first.rounds, first.accepted, first.seconds) == (6, 4, 7.0)
    assert first.phase_seconds == {"verify": 2.0, "draft": 0.2}
    s = first.summary()
    assert s["tokens_per_s"] == 1.0 and s["passes_tokens_per_s"] == [1.0, 2.0, 0.5]
    assert s["tau"] == (4 + 6) / 6


def test_slices_are_whole_waves_and_cover_every_prompt_once():
    from specd.worker.bench.engine_bench import SLICE_PROMPTS, slices

    for n in (1, 7, 40, 48):
        for c in (1, 3, 4, 16, 32):
            cut = slices(n, c)
            assert [i for lo, hi in cut for i in range(lo, hi)] == list(range(n))
            assert all((hi - lo) % c == 0 for lo, hi in cut[:-1])  # whole waves
            assert all(hi - lo >= SLICE_PROMPTS for lo, hi in cut[:-1])
    assert slices(40, 32) == [(0, 40)]  # never a lone tail wave at lower concurrency


def test_groups_take_each_slice_in_turn(target, chat_prompt_ids, monkeypatch):
    from specd.worker.bench import engine_bench

    monkeypatch.setattr(engine_bench, "SLICE_PROMPTS", 1)
    texts = ("Name two fruits.", "Name a colour.")
    prompts = [BenchPrompt(chat_prompt_ids(t), "chat", t) for t in texts]
    seen: list[tuple[str, int]] = []
    results = run_engine_groups(target, parse_groups("plain,ngram"), prompts, [1], max_tokens=5,
                                k=3, on_cell=lambda g, c: seen.append((g, c)),
                                engine_options={"cost_profile": "none"})
    # one pass, two slices, the order of two groups alternating from slice to slice
    assert seen == [("plain", 1), ("ngram", 1), ("ngram", 1), ("plain", 1)]
    for name in ("plain", "ngram"):
        cell = results[name][1]
        assert len(cell.outputs) == 2 and len(cell.pass_seconds) == 1
        assert cell.seconds == pytest.approx(cell.pass_seconds[0])
        assert cell.summary()["output_tokens"] == 10
    # the slices' outputs keep prompt order: each equals a run of that prompt alone
    alone = run_engine_groups(target, parse_groups("plain"), prompts[1:], [1], max_tokens=5,
                              k=3, engine_options={"cost_profile": "none"})
    assert results["plain"][1].outputs[1] == alone["plain"][1].outputs[0]


def test_sampling_variants_compare_coupled_with_standard(target, chat_prompt_ids):
    """``--sampling t1.0,t1.0-seeded``: each engine group per variant, one engine each;
    seeded cells match plain's seeded cell, and the report puts the two rules side by side."""
    from specd.worker.bench.engine_bench import coupled_vs_standard, format_table
    from specd.worker.bench.groups import parse_sampling, with_sampling

    assert parse_sampling("t0.7-seeded") == (0.7, True) and parse_sampling("greedy") == (0, False)
    with pytest.raises(Exception, match="tT-seeded"):
        parse_sampling("hot")
    prompts = [BenchPrompt(chat_prompt_ids(text), "chat", text) for text in
               ("Name three colours.", "Write a short poem about the sea.")]
    groups = with_sampling(parse_groups("plain,semi-ar-fixed"), ["t1.0", "t1.0-seeded"])
    assert [g.name for g in groups] == ["plain@t1.0", "semi-ar-fixed@t1.0",
                                        "plain@t1.0-seeded", "semi-ar-fixed@t1.0-seeded"]
    results = run_engine_groups(target, groups, prompts, [1, 2], max_tokens=8, k=3,
                                engine_options={"cost_profile": "none"})
    mark_matches(results)
    doc = report("smollm2-135m", results, {})
    seeded = doc["groups"]["semi-ar-fixed@t1.0-seeded"]
    assert seeded["1"]["match_plain"] is True and seeded["2"]["match_plain"] is True
    assert doc["groups"]["semi-ar-fixed@t1.0"]["1"]["match_plain"] is None  # not comparable
    # seeds are per prompt: the same outputs at c=1 and c=2
    assert results["plain@t1.0-seeded"][1].outputs == results["plain@t1.0-seeded"][2].outputs
    rows = coupled_vs_standard(doc["groups"])
    assert set(rows) == {"plain", "semi-ar-fixed"} and set(rows["semi-ar-fixed"]) == {"t1.0"}
    row = rows["semi-ar-fixed"]["t1.0"]["1"]
    assert row["tau_coupled"] >= 1.0 and row["tau_standard"] >= 1.0
    assert "semi-ar-fixed t1.0 c=1: tau standard" in format_table(doc)


def test_the_round_breakdown_in_lockstep_takes_a_round_of_each_group_in_turn(
        target, chat_prompt_ids, monkeypatch):
    from specd.worker.bench import round_breakdown
    from specd.worker.engine.core import EngineCore

    stepped: list[int] = []  # the engine (its core's id) of every step, in order
    step = EngineCore.step

    def logged(self: EngineCore) -> bool:
        stepped.append(id(self))
        return step(self)

    monkeypatch.setattr(EngineCore, "step", logged)
    prompts = [BenchPrompt(chat_prompt_ids(q), "chat", q)
               for q in ("Name two fruits.", "Count to five.")]
    out = round_breakdown.run(target, parse_groups("ngram"), prompts, concurrency=2,
                              max_tokens=8, k=3, passes=1, lockstep=True,
                              engine_options={"cost_profile": "none"})
    cores = list(dict.fromkeys(stepped))
    assert len(cores) == 2
    # until the first to finish went idle, each turn stepped both engines, in the order of
    # the turn: AB, BA, AB, ... (two groups' balanced order)
    turns = [stepped[i:i + 2] for i in range(0, 2 * min(len(r.rounds) for r in out.values()), 2)]
    assert len(turns) >= 4
    assert turns[::2] == [cores] * len(turns[::2]), stepped
    assert turns[1::2] == [cores[::-1]] * len(turns[1::2]), stepped
    # each core stepped once a round and once more to find itself idle; its time its own
    assert [stepped.count(c) for c in cores] == [len(out[n].rounds) + 1
                                                 for n in ("plain", "ngram")]
    for rec in out.values():
        assert sum(r.seconds for r in rec.rounds) <= rec.seconds
    doc = round_breakdown.summarise(out, concurrency=2)
    assert doc["plain"]["vs_plain"] == 1.0 and doc["ngram"]["tokens_per_round"] >= 1.0


def test_the_round_breakdown_can_hold_a_scheduled_groups_gate_open(target, chat_prompt_ids):
    from specd.worker.bench import round_breakdown

    groups = round_breakdown.with_open_gate(parse_groups("semi-ar-scheduled"))
    assert [g.name for g in groups] == ["plain", "semi-ar-scheduled",
                                        "semi-ar-scheduled+open-gate"]
    prompts = [BenchPrompt(chat_prompt_ids(q), "chat", q)
               for q in ("Name two fruits.", "Count to five.")]
    out = round_breakdown.run(target, groups, prompts, concurrency=2, max_tokens=8, k=3,
                              passes=1, engine_options={"cost_profile": "none"})
    doc = round_breakdown.summarise(out, concurrency=2)
    # held open, every full-batch round drafts but the last (one token left: nothing to draft);
    # that the open gate drafts where the gate would not: test_draft_gate (this cost profile
    # lets the gated twin draft too)
    opened = [r for r in out["semi-ar-scheduled+open-gate"].rounds
              if r.rows == 2 and not r.prefill_tokens]
    assert opened and all(r.kind == "speculative" for r in opened[:-1])
    assert doc["plain"]["drafted_share"] == 0.0
    assert doc["semi-ar-scheduled+open-gate"]["drafted_share"] > doc["plain"]["drafted_share"]
    # each drafted full-batch round is counted under the gate's reason for it
    drafted = sum(r.kind == "speculative" for r in opened)
    assert doc["semi-ar-scheduled+open-gate"]["drafted_why"] == {"held open": drafted}
    assert doc["semi-ar-scheduled+open-gate"]["not_drafted_why"] == {
        "held open": len(opened) - drafted}
    assert doc["plain"]["drafted_why"] == doc["plain"]["not_drafted_why"] == {}


def test_full_batch_counts_only_rounds_with_every_slot_decoding():
    """At C=2, a speculative group's rows end rounds apart and a newcomer is admitted while
    the other row decodes: that round (one row, a prefill chunk) and the drain (one row) are
    left out, as the first wave's prefill is; the full rounds' tokens over their wall time."""
    from specd.worker.bench import engine_bench
    from specd.worker.bench.drafting_ledger import Round

    rounds = [Round(0, False, 0.5, 2, False),  # the first wave's prefill
              Round(2, True, 1.0, 5, True),
              Round(2, True, 1.0, 3, True),  # a row ends here
              Round(1, False, 0.75, 1, False),  # the newcomer's prefill beside the other row
              Round(2, False, 0.5, 2, True),
              Round(1, True, 0.5, 3, True)]  # the drain
    walls = [0.6, 1.1, 1.2, 0.8, 0.7, 0.5]  # round time plus what ran between rounds
    assert engine_bench.full_batch(rounds, walls, 2) == (10, pytest.approx(3.0))
    # at C=1 every one-row decoding round is full; one with a prefill chunk beside it is not
    assert engine_bench.full_batch(rounds, walls, 1) == (3, 0.5)
    cell = engine_bench.Cell([[7] * 6], 6.0, [1.0], full_tokens=[2], full_seconds=[2.0])
    cell.add_slice(engine_bench.Cell([[7] * 3], 2.0, [1.5], full_tokens=[3], full_seconds=[2.0]))
    summary = cell.summary()
    assert summary["tokens_per_s"] == 9 / 8 and summary["full_batch_tokens_per_s"] == 5 / 4


def test_a_length_spread_gives_every_group_the_same_uneven_lengths(target, chat_prompt_ids):
    from specd.worker.bench.engine_bench import request_length

    prompts = [BenchPrompt(chat_prompt_ids(text), "chat", text) for text in
               ("Name three colours.", "Count from one to six.", "What is a list in Python?")]
    results = run_engine_groups(target, parse_groups("plain,ngram"), prompts, [1], max_tokens=12,
                                k=3, engine_options={"cost_profile": "none"}, length_spread=0.5)
    want = [request_length(12, i, 0.5) for i in range(3)]
    assert len(set(want)) > 1  # uneven
    for name in ("plain", "ngram"):
        assert [len(out) for out in results[name][1].outputs] == want, name
    mark_matches(results)
    assert report("smollm2-135m", results, {})["groups"]["ngram"]["1"]["match_plain"] is True


def test_every_engine_prices_and_pads_by_one_measured_table(target, chat_prompt_ids):
    """The step-cost table is the target's on this machine: measured once, by the first
    engine, so no group runs another padding drawn from its own noisy timings."""
    prompts = [BenchPrompt(chat_prompt_ids("Name two fruits."), "chat", "Name two fruits.")]
    results = run_engine_groups(target, parse_groups("plain,semi-ar-fixed,semi-ar-scheduled"),
                                prompts, [1], max_tokens=4, k=3)
    tables = [cells[1].costs for cells in results.values()]
    assert tables[0] is not None and tables[0].pad_to
    assert all(t is tables[0] for t in tables)
