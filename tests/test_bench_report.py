"""The benchmark's report: ratios come from the one run's cells (pure functions, no model)."""

from __future__ import annotations

import statistics

import pytest

from specd.worker.bench.engine_bench import Cell, comparisons, format_table, mark_matches, report


def cell(tokens: int, seconds: float, outputs: list[list[int]] | None = None, **kw) -> Cell:
    outputs = outputs or [[1] * tokens]
    return Cell(outputs, seconds, [tokens / seconds], **kw)


def test_comparisons_pick_the_best_rival_per_concurrency():
    mem = {"target": 990, "kv_cache": 10, "drafter": 30}
    results = {
        "plain": {1: cell(100, 10.0), 16: cell(100, 1.0)},
        "semi-ar-fixed": {1: cell(100, 5.0), 16: cell(100, 2.0)},
        "semi-ar-scheduled": {1: cell(100, 4.0, memory=mem,
                                      phase_seconds={"draft": 1, "schedule": 0.02,
                                                     "verify": 2.9, "commit": 0.08}),
                              16: cell(100, 1.25)},
        "hf-generate": {1: cell(100, 8.0)},
    }
    doc = report("m", results, {})
    rows = doc["comparisons"]["semi-ar-scheduled"]
    assert rows["1"]["best_rival"] == "semi-ar-fixed"
    assert abs(rows["1"]["vs_best_rival"] - 1.25) < 1e-9
    assert abs(rows["1"]["vs_plain"] - 2.5) < 1e-9
    assert abs(rows["1"]["vs_hf_generate"] - 2.0) < 1e-9
    assert abs(rows["1"]["schedule_share"] - 0.005) < 1e-9
    assert rows["16"]["best_rival"] == "plain" and abs(rows["16"]["vs_best_rival"] - 0.8) < 1e-9
    assert "vs_hf_generate" not in rows["16"]
    assert doc["groups"]["semi-ar-scheduled"]["1"]["drafter_memory_share"] == 0.03
    assert doc["groups"]["plain"]["1"]["step_cost_ms"] is None
    table = format_table(doc)
    assert "semi-ar-scheduled c=1: best_rival semi-ar-fixed, vs_best_rival 1.25" in table


def test_cells_carry_the_measured_cost_table():
    from specd.worker.engine.scheduler import CostTable

    costs = CostTable.from_measurements([1, 2, 3, 4], [0.037, 0.064, 0.09, 0.059])
    summary = cell(10, 1.0, costs=costs).summary()
    assert summary["step_cost_ms"] == {"1": 37.0, "2": 59.0, "3": 59.0, "4": 59.0}
    assert summary["pad_to"] == [1, 4, 4, 4]


def test_mark_matches_counts_differing_requests():
    results = {"plain": {1: cell(2, 1.0, [[1, 2], [3, 4]])},
               "semi-ar-fixed": {1: cell(2, 1.0, [[1, 2], [3, 5]])}}
    mark_matches(results)
    assert results["plain"][1].match_plain is True
    assert results["semi-ar-fixed"][1].match_plain is False
    assert results["semi-ar-fixed"][1].matched_requests == 1


def test_mark_matches_measures_the_gap_where_outputs_first_differ():
    """Each differing request is measured once, at its first divergence from plain's tokens
    (with plain's tokens before it); the cell keeps the worst gap; peers are not measured."""
    results = {"plain": {1: cell(3, 1.0, [[1, 2, 3], [4, 5, 6], [7, 8, 9]])},
               "semi-ar-fixed": {1: cell(3, 1.0, [[1, 2, 3], [4, 0, 0], [7, 8, 0]])},
               "hf-generate": {1: cell(3, 1.0, [[0, 0, 0], [4, 5, 6], [7, 8, 9]])}}
    asked = []

    def gap(index, tokens):
        asked.append((index, tokens))
        return 0.1 * (index + 1)

    mark_matches(results, until_eos=["hf-generate"], top2_gap=gap)
    assert asked == [(1, [4]), (2, [7, 8])]
    assert results["semi-ar-fixed"][1].divergence_top2_gap_max == pytest.approx(0.3)
    assert results["semi-ar-fixed"][1].summary()["divergence_top2_gap_max"] == 0.3
    assert results["plain"][1].divergence_top2_gap_max is None
    assert results["hf-generate"][1].divergence_top2_gap_max is None


def test_comparisons_cover_the_scheduled_groups_that_ran():
    assert comparisons({"plain": {}}) == {"semi-ar-scheduled": {}}
    both = {"plain": {"1": {"tokens_per_s": 10.0}},
            "semi-ar-lookup-scheduled": {"1": {"tokens_per_s": 15.0, "phase_share": {}}}}
    rows = comparisons(both)  # only the scheduled groups that ran
    assert list(rows) == ["semi-ar-lookup-scheduled"]
    assert rows["semi-ar-lookup-scheduled"]["1"]["vs_plain"] == 1.5


def test_every_draft_length_that_ran_is_a_rival_and_compared():
    def row(rate: float) -> dict:
        return {"1": {"tokens_per_s": rate, "phase_share": {}}}

    groups = {"plain": row(10.0), "semi-ar-fixed": row(12.0), "semi-ar-fixed:k2": row(14.0),
              "semi-ar-scheduled": row(15.0), "semi-ar-scheduled:k4": row(13.0),
              "semi-ar-fixed@t0.7": row(30.0)}  # a sampling variant is not a greedy rival
    rows = comparisons(groups)
    assert list(rows) == ["semi-ar-scheduled", "semi-ar-scheduled:k4"]
    assert rows["semi-ar-scheduled"]["1"]["best_rival"] == "semi-ar-fixed:k2"
    assert rows["semi-ar-scheduled:k4"]["1"]["vs_best_rival"] == pytest.approx(13 / 14)


def test_scheme_b_with_lookup_is_judged_against_fixed_length_with_lookup():
    """The same drafter verified at a fixed length is the rival a scheduled group must beat."""
    from specd.worker.bench.groups import parse_groups

    lookup_fixed = parse_groups("semi-ar-lookup-fixed")[1]
    assert (lookup_fixed.drafter, lookup_fixed.mode, lookup_fixed.lookup) == (
        "semi-ar", "fixed", True)
    groups = {"plain": {"1": {"tokens_per_s": 10.0}},
              "semi-ar-fixed": {"1": {"tokens_per_s": 12.0}},
              "semi-ar-lookup-fixed": {"1": {"tokens_per_s": 16.0}},
              "semi-ar-lookup-scheduled": {"1": {"tokens_per_s": 18.0, "phase_share": {}}}}
    row = comparisons(groups)["semi-ar-lookup-scheduled"]["1"]
    assert row["best_rival"] == "semi-ar-lookup-fixed"
    assert row["vs_best_rival"] == pytest.approx(18 / 16)


def test_a_group_can_carry_its_own_draft_length():
    from specd import SpecdError
    from specd.worker.bench.groups import kind_of, parse_groups

    groups = parse_groups("semi-ar-fixed:k2,semi-ar-fixed,semi-ar-scheduled:k5")
    assert [(g.name, g.k) for g in groups] == [
        ("plain", None), ("semi-ar-fixed:k2", 2), ("semi-ar-fixed", None),
        ("semi-ar-scheduled:k5", 5)]
    # its own engine (not shared with the same drafter at the run's K), its own policy
    assert groups[1].base != groups[2].base and kind_of(groups[1].name) == groups[2].name
    assert (groups[1].policy(4).fixed_length, groups[2].policy(4).fixed_length) == (2, 4)
    assert groups[3].policy(4).max_verify == 5
    for bad, says in (("plain:k2", "only drafting groups"), ("semi-ar-fixed:k0", ":kN"),
                      ("semi-ar-fixed:2", ":kN"), ("nope:k2", "unknown group"),
                      ("semi-ar-fixed,semi-ar-fixed", "twice")):
        with pytest.raises(SpecdError, match=says):
            parse_groups(bad)


def test_a_scheduled_group_can_carry_its_own_survival_floor():
    from specd import SpecdError
    from specd.api.policy import Policy
    from specd.worker.bench.groups import parse_groups

    groups = parse_groups("semi-ar-scheduled,semi-ar-scheduled:k3:f0.05")
    default = Policy.model_fields["survival_floor"].default
    assert groups[1].policy(3).survival_floor == default
    assert (groups[2].policy(4).survival_floor, groups[2].policy(4).k_max) == (0.05, 3)
    assert groups[1].base != groups[2].base  # its own engine
    for bad in ("semi-ar-fixed:f0.05", "semi-ar-scheduled:f1.5", "semi-ar-scheduled:fx"):
        with pytest.raises(SpecdError, match="survival floor :fX"):
            parse_groups(bad)
    with pytest.raises(SpecdError, match="gives a setting twice"):
        parse_groups("semi-ar-scheduled:k3:f0.05:k4")  # not silently K=4


def test_peers_are_compared_up_to_the_first_end_of_turn():
    """ignore_eos: the engine emits end-of-turn (2) and goes on; transformers' min_new_tokens
    masks it. Peers match up to it; engine groups are compared whole."""
    def results():
        return {"plain": {1: cell(2, 1.0, [[5, 2, 7], [4, 4, 4]])},
                "hf-generate": {1: cell(2, 1.0, [[5, 9, 9], [4, 4, 8]])},
                "semi-ar-fixed": {1: cell(2, 1.0, [[5, 2, 8], [4, 4, 4]])}}
    r = results()
    mark_matches(r, eos_ids=[2], until_eos=["hf-generate"])
    assert r["hf-generate"][1].matched_requests == 1  # the second has no end-of-turn: whole
    assert r["semi-ar-fixed"][1].matched_requests == 1  # past end-of-turn still counts
    r = results()
    mark_matches(r)
    assert r["hf-generate"][1].matched_requests == 0


def test_a_length_spread_covers_its_range_evenly_and_zero_keeps_every_length():
    from specd.worker.bench.engine_bench import request_length

    assert {request_length(128, i) for i in range(48)} == {128}
    lengths = [request_length(128, i, 0.5) for i in range(48)]
    assert lengths[0] == 128 and min(lengths) >= 64 and max(lengths) == 128
    # evenly: every eighth of the range holds some of the 48 requests
    assert {(n - 64) * 8 // 65 for n in lengths} == set(range(8))
    assert request_length(1, 5, 0.9) == 1  # never below one token


def test_the_command_rejects_a_length_spread_outside_its_range_or_with_peers(capsys):
    from specd.cli import main

    assert main(["bench", "engine", "--length-spread", "1.5"]) != 0
    assert "--length-spread must be in [0, 1), got 1.5" in capsys.readouterr().err
    assert main(["bench", "engine", "--groups", "hf-generate", "--length-spread", "0.5"]) != 0
    assert "engine groups only" in capsys.readouterr().err


def test_a_plain_twin_reports_the_noise_floor_beside_each_ratio():
    """``plain-twin`` runs plain's work on a second engine: its ratio to plain is what
    identical work reads in that run, reported beside each scheduled group's ratio (whole
    slices and full batch); it is not a rival, and without it no twin ratio appears."""
    from specd.worker.bench.groups import parse_groups

    def row(rate: float, full: float) -> dict:
        return {"4": {"tokens_per_s": rate, "full_batch_tokens_per_s": full,
                      "phase_share": {}}}

    groups = {"plain": row(100.0, 120.0), "plain-twin": row(97.0, 126.0),
              "semi-ar-scheduled": row(98.0, 117.0)}
    r = comparisons(groups)["semi-ar-scheduled"]["4"]
    assert r["best_rival"] == "plain" and r["vs_plain"] == pytest.approx(0.98)
    assert r["twin_vs_plain"] == pytest.approx(0.97)
    assert r["full_batch_twin_vs_plain"] == pytest.approx(1.05)
    assert r["full_batch_vs_plain"] == pytest.approx(117 / 120)
    assert r["full_batch_best_rival"] == "plain"  # the twin read faster, but is no rival
    del groups["plain-twin"]
    assert not any("twin" in k for k in comparisons(groups)["semi-ar-scheduled"]["4"])
    twin = parse_groups("plain,plain-twin")[1]
    assert (twin.drafter, twin.mode, twin.base) == ("none", "plain", "plain-twin")


def test_paired_ratios_cancel_a_drift_between_passes():
    """Each pass's ratio is taken within the pass, then the median over passes: a machine that
    slows from pass to pass moves both groups of a pass alike. Here plain slows from pass to
    pass and the scheduled group reads 0.99x plain in two passes of three: the ratio of the
    medians takes its one slow pass (the middle value of its passes) against plain's middle
    pass, the paired median does not."""
    def row(passes: list[float]) -> dict:
        return {"32": {"full_batch_tokens_per_s": statistics.median(passes),
                       "passes_full_batch_tokens_per_s": passes, "phase_share": {}}}

    groups = {"plain": row([120.0, 100.0, 80.0]), "semi-ar-fixed": row([60.0, 50.0, 40.0]),
              "semi-ar-scheduled": row([118.8, 85.0, 79.2])}
    r = comparisons(groups)["semi-ar-scheduled"]["32"]
    assert r["full_batch_vs_plain"] == pytest.approx(0.85)
    assert r["full_batch_vs_plain_paired"] == pytest.approx(0.99)  # median(0.99, 0.85, 0.99)
    assert r["full_batch_vs_best_rival_paired"] == r["full_batch_vs_plain_paired"]
    groups["semi-ar-scheduled"] = row([96.0, 85.0, 79.2])  # slower in two passes: it shows
    assert comparisons(groups)["semi-ar-scheduled"]["32"]["full_batch_vs_plain_paired"] == (
        pytest.approx(0.85))
    # one pass each: no pairing to report
    groups = {g: row(c["32"]["passes_full_batch_tokens_per_s"][:1]) for g, c in groups.items()}
    assert "full_batch_vs_plain_paired" not in comparisons(groups)["semi-ar-scheduled"]["32"]
