"""Arrival schedules: mean rate and burstiness checked statistically; replay of trace files
in the Azure LLM inference and BurstGPT schemas; identical seeded schedules."""

from __future__ import annotations

import random

import pytest

from specd.pilot import traces as tr
from specd.pilot.config import TraceSpec, parse_pilot
from specd.pilot.prompts import load_prompts


def _pilot(tmp_path, traces=None):
    return parse_pilot({
        "groups": {g: {"endpoint": "http://127.0.0.1:9"} for g in ("G0", "G1", "G2")},
        "task_groups": {"chat": {"output": {"min": 8, "max": 16}},
                        "code": {"output": {"min": 20, "max": 30}}},
        "slo": {"ttft_s": 1, "tpot_s": 0.1, "e2e_s": 5},
        "traces": traces or [{"name": "flat", "load": 0.5}]}, tmp_path)


def test_poisson_mean_rate_and_unit_cv() -> None:
    times = tr.poisson_times(5.0, 2000.0, random.Random(1))
    rate, cv2 = tr.inter_arrival_stats(times)
    assert rate == pytest.approx(5.0, rel=0.03)  # ~10000 arrivals: sd of the rate ~1 %
    assert cv2 == pytest.approx(1.0, abs=0.06)
    assert tr.dispersion_index(times, 2000.0, 10.0) == pytest.approx(1.0, abs=0.25)


@pytest.mark.parametrize("shape", [0.25, 0.5])
def test_gamma_keeps_the_mean_rate_and_is_burstier(shape: float) -> None:
    times = tr.gamma_times(4.0, shape, 3000.0, random.Random(2))
    rate, cv2 = tr.inter_arrival_stats(times)
    assert rate == pytest.approx(4.0, rel=0.05)
    assert cv2 == pytest.approx(1.0 / shape, rel=0.2)  # CV^2 = 1 / shape
    assert tr.dispersion_index(times, 3000.0, 5.0) > 1.5


def test_onoff_keeps_the_mean_rate_in_bursts() -> None:
    times = tr.onoff_times(2.0, 5.0, 15.0, 4000.0, random.Random(3))
    rate = len(times) / 4000.0
    assert rate == pytest.approx(2.0, rel=0.05)
    assert all(t % 20.0 < 5.0 for t in times)  # nothing in the off periods
    assert tr.dispersion_index(times, 4000.0, 5.0) > 5  # idle bins and busy bins


def _azure(path, n=400, gap_s=0.5):
    rows = ["TIMESTAMP,ContextTokens,GeneratedTokens"]
    for i in range(n):
        sec = i * gap_s
        rows.append(f"2023-11-16 18:{int(sec // 60) % 60:02d}:{sec % 60:09.6f}0,"
                    f"{100 + 7 * i % 900},{5 + i % 50}")
    path.write_text("\n".join(rows) + "\n")


def test_replay_azure_schema_scaled_to_the_target_rate(tmp_path) -> None:
    path = tmp_path / "azure.csv"
    _azure(path)  # 2 requests/s over 200 s
    records = tr.read_trace_file(path)
    assert len(records) == 400 and records[0].t == 0.0
    assert records[1].t == pytest.approx(0.5, abs=1e-6)
    scaled = tr.scale_records(records, 8.0, 40.0)  # 4x faster
    assert len(scaled) / 40.0 == pytest.approx(8.0, rel=0.03)
    assert [r.output_tokens for r in scaled[:3]] == [5, 6, 7]
    slow = tr.scale_records(records, 0.5, 100.0)  # 4x slower: first 50 requests
    assert len(slow) == 50


def test_replay_burstgpt_schema_repeats_a_short_file(tmp_path) -> None:
    path = tmp_path / "burstgpt.csv"
    lines = ["Timestamp,Model,Request tokens,Response tokens,Total tokens,Log Type"]
    lines += [f"{i * 2.0},ChatGPT,{50 + i},{10 + i},{60 + 2 * i},Conversation log"
              for i in range(20)]
    path.write_text("\n".join(lines) + "\n")
    records = tr.read_trace_file(path)
    assert records[-1].t == 38.0 and records[3].input_tokens == 53
    scaled = tr.scale_records(records, 1.0, 100.0)  # 20 requests a 20 s period
    assert len(scaled) == pytest.approx(100, abs=2)


def test_replay_refuses_an_unknown_schema(tmp_path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("when,in,out\n1,2,3\n2,3,4\n")
    with pytest.raises(tr.PilotError, match="none of the columns"):
        tr.read_trace_file(path, "traces.replay")


def test_schedules_are_seeded_identical_and_flag_warmup(tmp_path) -> None:
    pilot = _pilot(tmp_path)
    prompts = load_prompts(pilot)
    spec = TraceSpec(name="burst", kind="gamma", rate=3.0, burstiness=0.5, duration_s=60,
                     warmup_s=10, role="burst")
    a = tr.build_schedule(pilot, spec, 3.0, prompts, repeat=0)
    b = tr.build_schedule(pilot, spec, 3.0, prompts, repeat=0)
    c = tr.build_schedule(pilot, spec, 3.0, prompts, repeat=1)
    assert a == b and a != c
    assert all(x.warmup == (x.t < 10) for x in a)
    assert {x.task_group for x in a} == {"chat", "code"}
    for x in a:
        lo, hi = (8, 16) if x.task_group == "chat" else (20, 30)
        assert lo <= x.max_tokens <= hi
        assert prompts[x.task_group][x.prompt].task_group == x.task_group


def test_replay_schedule_maps_lengths_onto_real_prompts(tmp_path) -> None:
    path = tmp_path / "azure.csv"
    _azure(path)
    pilot = _pilot(tmp_path, [{"name": "replay", "kind": "replay", "file": "azure.csv",
                               "rate": 4.0, "duration_s": 20, "warmup_s": 0}])
    prompts = load_prompts(pilot)
    arrivals = tr.build_schedule(pilot, pilot.traces[0], 4.0, prompts)
    assert len(arrivals) == pytest.approx(80, abs=2)
    for x in arrivals:  # output lengths from the file, clipped to the task group's range
        lo, hi = (8, 16) if x.task_group == "chat" else (20, 30)
        assert lo <= x.max_tokens <= hi


def test_the_default_prompts_are_real_and_bilingual(tmp_path) -> None:
    pilot = parse_pilot({
        "groups": {g: {"endpoint": "http://127.0.0.1:9"} for g in ("G0", "G1", "G2")},
        "task_groups": {n: {} for n in ("chat", "code", "structured", "long-form")},
        "slo": {"ttft_s": 1, "tpot_s": 0.1, "e2e_s": 5},
        "traces": [{"name": "flat", "load": 0.5}]}, tmp_path)
    prompts = load_prompts(pilot)
    assert {n: len(p) for n, p in prompts.items()} == {"chat": 12, "code": 12,
                                                       "structured": 12, "long-form": 12}
    for group in prompts.values():
        assert {p.lang for p in group} == {"en", "zh"}
    assert prompts["code"][0].chatml().startswith("<|im_start|>user\nWrite a Python")
