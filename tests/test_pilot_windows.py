"""Window accounting on /metrics texts recorded from a real `specd serve --drafter semi-ar`
(tests/data/pilot/metrics-semi-ar-*.txt: before, during and after 8 requests): the windows'
sums reconcile with the counters, resets and failed scrapes are handled."""

from __future__ import annotations

from pathlib import Path

import pytest

from specd.pilot import promtext

DATA = Path(__file__).resolve().parent / "data" / "pilot"
TEXTS = [(DATA / f"metrics-semi-ar-{i}.txt").read_text() for i in range(4)]
TIMES = [0.0, 12.0, 24.0, 43.0]


def test_parse_reads_the_servers_counters() -> None:
    last = promtext.totals(promtext.parse(TEXTS[3]))
    assert last["committed"] == 8 * 23  # 8 requests x 24 tokens, the first from prefill
    assert last["rounds"] > 0 and last["drafted"] >= last["verified"] >= last["accepted"]
    assert last["verify_s"] > last["draft_s"] > last["schedule_s"] > 0
    outcomes = promtext.requests_by_outcome(promtext.parse(TEXTS[3]))
    assert outcomes.get("finished") == 8
    chat = promtext.totals(promtext.parse(TEXTS[3]), task_group="chat")
    code = promtext.totals(promtext.parse(TEXTS[3]), task_group="code")
    assert chat["committed"] + code["committed"] == last["committed"]


def test_the_windows_reconcile_with_the_counters() -> None:
    ws = promtext.windows(list(zip(TIMES, TEXTS, strict=True)))
    assert len(ws) == 3 and not any(w.reset or w.spans_gap for w in ws)
    first = promtext.totals(promtext.parse(TEXTS[0]))
    last = promtext.totals(promtext.parse(TEXTS[3]))
    total = promtext.summed(ws)
    for key in promtext.KEYS:
        assert total[key] == pytest.approx(last[key] - first[key], abs=1e-9), key
    # the derived figures are the counters' own ratios
    d = promtext.derive(total)
    decode = total["draft_s"] + total["schedule_s"] + total["verify_s"] + total["commit_s"]
    assert d["cost_per_token_ms"] == pytest.approx(1000 * decode / total["committed"])
    assert d["tokens_per_round"] == pytest.approx(total["committed"] / total["rounds"])
    assert d["tau"] == pytest.approx(total["tau_sum"] / total["tau_count"])
    assert 0 < d["draft_share"] < 0.5


def test_a_failed_scrape_leaves_a_gap_the_next_window_spans() -> None:
    scrapes = [(0.0, TEXTS[0]), (12.0, None), (24.0, TEXTS[2]), (43.0, TEXTS[3])]
    ws = promtext.windows(scrapes)
    assert [(w.t0, w.t1, w.spans_gap) for w in ws] == [(0.0, 24.0, True), (24.0, 43.0, False)]
    full = promtext.summed(promtext.windows(list(zip(TIMES, TEXTS, strict=True))))
    assert promtext.summed(ws) == pytest.approx(full)


def test_a_counter_reset_takes_the_new_value() -> None:
    # the server restarted between the second and third scrape: its counters start again
    scrapes = [(0.0, TEXTS[0]), (12.0, TEXTS[2]), (24.0, TEXTS[1])]
    ws = promtext.windows(scrapes)
    assert ws[1].reset
    assert ws[1].delta["committed"] == promtext.totals(promtext.parse(TEXTS[1]))["committed"]


def test_the_worked_example_in_window_form() -> None:
    # plain: 1 token a round at 40 ms; A: 60 ms rounds committing 3 tokens
    plain = promtext.derive({"rounds": 100, "committed": 100, "verify_s": 4.0})
    a = promtext.derive({"rounds": 100, "committed": 300, "draft_s": 1.0, "verify_s": 5.0})
    assert plain["cost_per_token_ms"] == pytest.approx(40.0)
    assert a["cost_per_token_ms"] == pytest.approx(20.0)
    assert a["round_ms"] == pytest.approx(60.0) and a["draft_share"] == pytest.approx(1 / 6)
    assert promtext.derive({"rounds": 0, "committed": 0})["cost_per_token_ms"] is None
