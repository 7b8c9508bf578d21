"""Bad pilot files are refused before any load is sent, naming the field."""

from __future__ import annotations

import copy
from pathlib import Path

import pytest
import yaml

from specd.pilot.config import PilotError, load_pilot, parse_pilot
from specd.pilot.runner import PilotRun, run_pilot
from specd_dev.fake_worker import FakeWorker

ROOT = Path(__file__).resolve().parents[1]
GOOD = {
    "groups": {"G0": {"serve": {"drafter": "none", "policy": {"mode": "plain"}}},
               "G1": {"serve": {"drafter": "semi-ar",
                                "policy": {"mode": "scheduled", "k_max": 3,
                                           "fixed_length": 3}}},
               "G2": {"serve": {"drafter": "none", "max_slots": 10}}},
    "task_groups": {"chat": {}, "code": {"output": {"min": 16, "max": 32}}},
    "slo": {"ttft_s": 2, "tpot_s": 0.2, "e2e_s": 10},
    "traces": [{"name": "flat", "load": 0.5, "role": "flat"}],
}


def refused(doc, tmp_path=".") -> str:
    with pytest.raises(PilotError) as info:
        parse_pilot(doc, tmp_path)
    return str(info.value)


def edit(**changes):
    doc = copy.deepcopy(GOOD)
    for path, value in changes.items():
        keys = path.split("__")
        node = doc
        for k in keys[:-1]:
            node = node[k]
        node[keys[-1]] = value
    return doc


def test_the_good_file_and_the_committed_sample_parse() -> None:
    pilot = parse_pilot(GOOD)
    assert pilot.repeats == 3 and pilot.groups["G2"].serve.max_slots == 10
    sample = load_pilot(ROOT / "examples" / "pilot-smollm2.yaml")
    assert sample.repeats >= 3
    assert {t.role for t in sample.traces} >= {"flat", "peak", "burst"}
    assert set(sample.task_groups) == {"chat", "code", "structured", "long-form"}


@pytest.mark.parametrize("path, value, field", [
    ("slo__p95", 1, "slo.p95: unknown key"),
    ("groups__G1__serve__drafterr", "x", "groups.G1.serve.drafterr: unknown key"),
    ("traces", [{"name": "flat", "load": 0.5, "burstyness": 0.5}], "traces.0.burstyness"),
    ("surprise", 1, "surprise: unknown key"),
])
def test_an_unknown_key_is_named(path, value, field) -> None:
    assert field in refused(edit(**{path: value}))


@pytest.mark.parametrize("slo, words", [
    ({"ttft_s": 2, "tpot_s": 0.2, "e2e_s": 1}, "impossible SLO: e2e_s 1.0 is below ttft_s"),
    ({"ttft_s": 2, "tpot_s": 0.2, "e2e_s": 10, "timeout_s": 5}, "timeout_s 5.0 is below e2e_s"),
    ({"ttft_s": 0, "tpot_s": 0.2, "e2e_s": 10}, "slo.ttft_s"),
    ({"ttft_s": 2, "tpot_s": 0.2, "e2e_s": 10, "attainment": 1.5}, "slo.attainment"),
    ({"ttft_s": 2, "tpot_s": 0.2, "e2e_s": float("inf")}, "e2e_s must be finite"),
])
def test_an_impossible_slo_is_refused(slo, words) -> None:
    message = refused(edit(slo=slo))
    assert words in message and "slo" in message


def test_other_refusals_name_their_field(tmp_path) -> None:
    doc = edit()
    del doc["groups"]["G2"]
    assert "groups: " in refused(doc) and "G0, G1, G2" in refused(doc)
    assert "groups.G1.serve.policy" in refused(edit(groups__G1__serve__policy={"mode": "x"}))
    assert "groups.G1" in refused(edit(groups__G1={"serve": {}, "endpoint": "http://x"}))
    assert "traces.0" in refused(edit(traces=[{"name": "flat", "load": 0.5, "rate": 2}]))
    assert "a burst trace needs burstiness below 1" in refused(edit(traces=[
        {"name": "b", "kind": "gamma", "load": 0.9, "burstiness": 2, "role": "burst"}]))
    assert "traces.0.file" in refused(edit(traces=[
        {"name": "r", "kind": "replay", "load": 0.5, "file": "missing.csv"}]), tmp_path)
    assert "groups.G0.serve.max_context" in refused(
        edit(groups__G0__serve={"max_context": 64}, task_groups={"x": {"output": {"max": 60}}}))
    assert "task_groups.chat.output" in refused(edit(task_groups={"chat": {"output": {
        "min": 9, "max": 3}}}))


def test_a_bad_yaml_file(tmp_path) -> None:
    path = tmp_path / "p.yaml"
    path.write_text("groups: [unclosed\n")
    with pytest.raises(PilotError, match="not YAML"):
        load_pilot(path)


def _endpoints(urls):
    doc = edit(groups={g: {"endpoint": u} for g, u in zip(("G0", "G1", "G2"), urls,
                                                           strict=True)})
    return doc


def test_an_unreachable_endpoint_is_refused_before_any_load(tmp_path) -> None:
    with FakeWorker() as g0, FakeWorker() as g1:
        dead = FakeWorker()
        url = dead.url
        dead.server.server_close()  # nothing listens there now
        pilot = parse_pilot(_endpoints([g0.url, g1.url, url]), tmp_path)
        with pytest.raises(PilotError, match=r"groups\.G2\.endpoint: .* unreachable"):
            run_pilot(pilot, tmp_path / "out")
        assert g0.chat_requests == g1.chat_requests == 0


def test_an_slo_no_idle_server_meets_is_refused_in_preflight(tmp_path) -> None:
    with FakeWorker(token_s=0.01) as a, FakeWorker(token_s=0.01) as b, \
            FakeWorker(token_s=0.01) as c:
        doc = _endpoints([a.url, b.url, c.url])
        doc["slo"] = {"ttft_s": 0.1, "tpot_s": 0.2, "e2e_s": 0.12}  # 32 tokens x 10 ms
        pilot = parse_pilot(doc, tmp_path)
        with pytest.raises(PilotError, match=r"slo\.e2e_s: impossible on these servers"):
            run_pilot(pilot, tmp_path / "out")
        # only the preflight's two requests per group: no load
        assert a.chat_requests == b.chat_requests == c.chat_requests == 2


def test_the_sample_yaml_round_trips() -> None:
    data = yaml.safe_load((ROOT / "examples" / "pilot-smollm2.yaml").read_text())
    run = PilotRun(parse_pilot(data, ROOT / "examples"), ROOT)
    run.prepare()  # prompts found, schedules buildable
    assert set(run.prompts) == {"chat", "code", "structured", "long-form"}
