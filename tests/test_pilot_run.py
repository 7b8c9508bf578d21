"""A whole pilot against fake workers (no model): the run, the report, and a server that
dies mid-run reported as failed requests, not dropped from the figures."""

from __future__ import annotations

import asyncio
import json

import pytest

from specd.pilot.config import parse_pilot
from specd.pilot.load import run_schedule
from specd.pilot.prompts import load_prompts
from specd.pilot.report import build_report, summarize
from specd.pilot.runner import run_pilot
from specd.pilot.traces import Arrival
from specd_dev.fake_worker import FakeWorker


def doc(urls, **over):
    d = {
        "name": "fake", "seed": 3, "repeats": 3, "window_s": 0.25,
        "groups": {g: {"endpoint": u} for g, u in zip(("G0", "G1", "G2"), urls, strict=True)},
        "task_groups": {"chat": {"output": {"min": 4, "max": 8}},
                        "code": {"output": {"min": 4, "max": 8}}},
        "slo": {"ttft_s": 0.5, "tpot_s": 0.05, "e2e_s": 1.0, "attainment": 0.9, "timeout_s": 5},
        "capacity": {"start_rate": 8, "growth": 2, "max_steps": 2, "refine": 0,
                     "duration_s": 0.5, "warmup_s": 0.1},
        "traces": [{"name": "flat", "role": "flat", "load": 0.5, "duration_s": 0.5,
                    "warmup_s": 0.1},
                   {"name": "peak", "role": "peak", "load": 0.9, "duration_s": 0.5,
                    "warmup_s": 0.1},
                   {"name": "burst", "role": "burst", "kind": "gamma", "burstiness": 0.3,
                    "load": 0.7, "duration_s": 0.5, "warmup_s": 0.1}],
        "regression": {"prompts_per_task_group": 1, "max_tokens": 6, "cancel_after_chunks": 2},
    }
    d.update(over)
    return d


def test_a_server_dying_mid_run_counts_as_failed_requests(tmp_path) -> None:
    pilot = parse_pilot(doc(["http://x"] * 3, slo={"ttft_s": 1, "tpot_s": 0.5, "e2e_s": 2,
                                                   "timeout_s": 3}), tmp_path)
    prompts = load_prompts(pilot)
    arrivals = [Arrival(0.05 * i, "chat", i % 3, 6, False) for i in range(20)]
    with FakeWorker(token_s=0.01, die_after=8) as w:
        out = asyncio.run(run_schedule(w.url, "fake", arrivals, prompts, pilot.slo, 0.2))
    assert len(out.results) == 20  # every request sent is in the results
    outcomes = [r.outcome for r in out.results]
    assert outcomes.count("ok") <= 8 and outcomes.count("error") >= 12
    assert any(s.text is None for s in out.scrapes)  # the scrapes after the death failed
    s = summarize(out.results, pilot.slo, 1.0)
    assert s["requests"] == 20 and s["errors"] == outcomes.count("error")
    assert s["attainment"] == pytest.approx(s["met_slo"] / 20)  # failures in the denominator


def test_a_whole_pilot_against_fake_workers(tmp_path) -> None:
    # G1 commits 3 tokens a round at the same per-token price: faster; G2 as G0
    with FakeWorker(token_s=0.01, slowdown=0.3) as g0, \
            FakeWorker(token_s=0.004, slowdown=0.3, tokens_per_round=3, drafter="semi-ar") as g1, \
            FakeWorker(token_s=0.01, slowdown=0.3) as g2:
        pilot = parse_pilot(doc([g0.url, g1.url, g2.url]), tmp_path)
        out = run_pilot(pilot, tmp_path / "out")
        rep = build_report(out)
    index = json.loads((out / "run.json").read_text())
    assert index["capacity"]["G0"]["capacity_rps"]
    assert len([r for r in index["runs"] if r["phase"] == "trace"]) == 3 * 3 * 3
    checks = rep["regression"]["checks"]
    assert {c["check"] for c in checks} == {"greedy", "stop", "streaming", "cancellation"}
    assert all(c["ok"] for c in checks), [c for c in checks if not c["ok"]]
    assert set(rep["verdicts"]) == {"chat", "code", "all"}
    for v in rep["verdicts"].values():
        assert v["decision"] in ("adopt", "low-load only", "reject")
    # the windows reconcile with the counters, and the fake's 3 tokens a round show up
    w1 = rep["windows"]["flat"]["G1"]
    assert all(r["reconciled"] for r in w1["repeats"])
    assert rep["windows"]["flat"]["G0"]["steady"]["tokens_per_round"] == pytest.approx(1.0)
    assert w1["steady"]["tokens_per_round"] > 1.5
    assert rep["trace_greedy"]["G1"]["different"] == 0
    md = (out / "report.md").read_text()
    for words in ("Verdicts per task group", "The rule:", "Round accounting", "capacity.png",
                  "Business regression", "equal-resource"):
        assert words in md
    for png in ("capacity.png", "goodput.png", "e2e_p99.png", "windows.png"):
        assert (out / png).stat().st_size > 1000
    again = build_report(out)  # the report rebuilds from the folder alone
    assert again["verdicts"] == rep["verdicts"]
