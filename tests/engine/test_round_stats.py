"""A round's statistics on their own: counting (RoundStats, PositionCounts), the exporter that
hands them to Prometheus, and the round breakdown's summary (no model)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry

from specd.api import metrics as m
from specd.api.policy import Calibration, Policy
from specd.worker.bench.round_breakdown import GroupRounds, format_table, summarise
from specd.worker.engine.exporter import RoundExporter
from specd.worker.engine.metrics import EngineMetrics
from specd.worker.engine.round_stats import PositionCounts, RoundStats


def a_round(kind: str = "speculative", rows: int = 2, seconds: float = 0.1) -> RoundStats:
    stats = RoundStats(kind, rows, phases={"draft": seconds / 2, "schedule": 0.0,
                                           "verify": seconds / 2, "commit": 0.0},
                       parts={"draft": seconds / 2, "forward": seconds / 2})
    # chat drafted 3, verified 2, accepted 1; code (a probe request) drafted and verified none
    stats.add_request("chat", 3, 2, 1, counted=True)
    stats.positions.setdefault("chat", PositionCounts()).add([0.8, 0.5], Calibration(), 2, 1)
    stats.add_request("code", 0, 0, 0, counted=False)
    return stats


def test_counts_by_group_and_position():
    stats = a_round()
    assert stats.verified == 2 and stats.verified_requests == 1
    assert stats.seconds == 0.1
    chat = stats.groups["chat"]
    assert (chat.drafted, chat.verified, chat.accepted, chat.emitted, chat.rows) == (3, 2, 1, 2, 1)
    pos = stats.positions["chat"]
    # position 1 verified, reached and accepted; position 2 verified and reached, rejected
    assert pos.verified == [1, 1] and pos.reached == [1, 1] and pos.accepted == [1, 0]
    assert pos.predicted == [0.8, 0.5]


def test_the_exporter_puts_a_round_on_its_series():
    registry = CollectorRegistry()
    policy = Policy(mode="scheduled", groups={"code": {"mode": "plain"}})
    exporter = RoundExporter(EngineMetrics(registry), "semi-ar", policy)
    exporter.export(a_round())
    exporter.export(a_round(kind="plain"))
    lab = {m.LABEL_DRAFTER: "semi-ar", m.LABEL_POLICY_MODE: "scheduled",
           m.LABEL_POLICY_VERSION: policy.version()}

    def value(name: str, **labels: str) -> float | None:
        return registry.get_sample_value(name, labels)

    assert value(m.ROUNDS + "_total", **lab) == 2
    assert value(m.VERIFIED_REQUESTS + "_total", **lab) == 2
    assert value(m.EMITTED_TOKENS + "_total", **lab, task_group="chat") == 4
    # a group's series carry its own mode
    assert value(m.EMITTED_TOKENS + "_total", **{**lab, m.LABEL_POLICY_MODE: "plain"},
                 task_group="code") == 2
    assert value(m.ACCEPTED_PER_POSITION + "_total", **lab, task_group="chat",
                 position="1") == 2
    assert value(m.ACCEPTED_PER_POSITION + "_total", **lab, task_group="chat",
                 position="2") is None  # never accepted: no series
    # request-seconds by round kind: round time x the group's rows
    kind = {m.LABEL_TASK_GROUP: "chat", m.LABEL_POLICY_MODE: "scheduled", m.LABEL_BATCH: "2"}
    assert value(m.DECODE_SECONDS + "_total", **kind, round_kind="speculative") == 0.1
    assert value(m.DECODE_SECONDS + "_total", **kind, round_kind="plain") == 0.1
    assert exporter.phase_seconds["draft"] == 0.1
    # a probe request's acceptance is not in the per-request histogram
    assert value(m.ACCEPTANCE_LENGTH + "_count", **lab, task_group="chat") == 2
    assert value(m.ACCEPTANCE_LENGTH + "_count", **{**lab, m.LABEL_POLICY_MODE: "plain"},
                 task_group="code") is None
    # a round that also prefilled a newcomer's chunk is not decode work: left out of both
    # counters (its chunk would be charged to the decoding rows)
    with_chunk = a_round(kind="plain", seconds=0.4)
    with_chunk.prefill_tokens = 64
    exporter.export(with_chunk)
    assert value(m.DECODE_SECONDS + "_total", **kind, round_kind="plain") == 0.1
    assert value(m.DECODE_TOKENS + "_total", **kind, round_kind="plain") == 2
    assert value(m.ROUNDS + "_total", **lab) == 3  # counted as a round all the same
    assert abs(exporter.phase_seconds["draft"] - 0.3) < 1e-9


def test_a_policy_change_relabels_the_series():
    registry = CollectorRegistry()
    exporter = RoundExporter(EngineMetrics(registry), "semi-ar", Policy(mode="fixed"))
    new = Policy(mode="scheduled")
    exporter.set_policy(new)
    exporter.export(a_round())
    assert registry.get_sample_value(m.ROUNDS + "_total", {
        m.LABEL_DRAFTER: "semi-ar", m.LABEL_POLICY_MODE: "scheduled",
        m.LABEL_POLICY_VERSION: new.version()}) == 1
    assert registry.get_sample_value(m.POLICY_INFO, {
        m.LABEL_POLICY_MODE: "fixed", m.LABEL_POLICY_VERSION: Policy(mode="fixed").version(),
        m.LABEL_DRAFTER: "semi-ar"}) is None


def test_the_breakdown_compares_full_batch_rounds_only():
    plain = GroupRounds("plain", [a_round("plain", seconds=0.1) for _ in range(4)], 1.0, 100)
    mixed = [a_round("speculative", seconds=0.3), a_round("plain", seconds=0.1),
             RoundStats("plain", 1, prefill_tokens=40, phases={"verify": 5.0})]
    sched = GroupRounds("semi-ar-scheduled", mixed, 2.0, 100)
    doc = summarise({"plain": plain, "semi-ar-scheduled": sched}, concurrency=2)
    s = doc["semi-ar-scheduled"]
    assert s["vs_plain"] == 0.5 and s["full_batch_rounds"] == 2  # the prefill round is out
    assert s["drafted_share"] == 0.5
    assert s["ms_drafted"]["round"] == 300.0 and s["ms_not_drafted"]["round"] == 100.0
    assert s["ms_drafted"]["forward"] == 150.0
    assert s["verified_per_request"] == 1.0  # 4 verified over 2 rounds x 2 rows
    table = format_table(doc)
    assert "semi-ar-scheduled (not drafted)" in table and "plain (drafted)" not in table
    # the whole run by class: the prefill round and the full-batch rounds apart
    classes = s["by_class"]
    assert set(classes) == {"full", "full/drafted", "prefill"}
    assert classes["prefill"]["rounds"] == 1 and classes["prefill"]["seconds"] == 5.0
    assert classes["full/drafted"]["seconds"] == 0.3 and classes["full/drafted"]["tokens"] == 3
    assert classes["full/drafted"]["ms_per_token"] == 100.0
    assert sum(c["rounds"] for c in classes.values()) == len(mixed)
