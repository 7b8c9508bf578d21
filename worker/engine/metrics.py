"""Prometheus metrics of the engine, named per ``specd.api.metrics``. The registry is passed
in (tests make their own; the server passes the process registry)."""

from __future__ import annotations

from typing import Any

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram

from specd.api import metrics as m

SPEC = (m.LABEL_DRAFTER, m.LABEL_POLICY_MODE, m.LABEL_POLICY_VERSION)
SPEC_GROUP = (*SPEC, m.LABEL_TASK_GROUP)
LENGTH_BUCKETS = tuple(float(i) for i in range(0, 18))
PHASE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

class _Bound:
    """A metric with constant leading label values (e.g. revision, track) filled in."""

    def __init__(self, metric: Any, extra: tuple[str, ...]) -> None:
        self.metric = metric
        self.extra = extra

    def labels(self, *values: str) -> Any:
        return self.metric.labels(*self.extra, *values)

    def set(self, value: float) -> None:
        (self.metric.labels(*self.extra) if self.extra else self.metric).set(value)

    def clear(self) -> None:
        self.metric.clear()


class EngineMetrics:
    """``const_labels``: label names and values put on every engine metric (the server passes
    ``{"revision": ..., "track": ...}``)."""

    def __init__(self, registry: CollectorRegistry | None = None,
                 const_labels: dict[str, str] | None = None) -> None:
        r = registry if registry is not None else CollectorRegistry()
        self.registry = r
        const = dict(const_labels or {})
        names = tuple(const)
        extra = tuple(str(v) for v in const.values())

        def wrap(cls: Any, name: str, doc: str, labelnames: tuple[str, ...] = (), **kw: Any) -> _Bound:
            return _Bound(cls(name, doc, (*names, *labelnames), registry=r, **kw), extra)

        self.rounds = wrap(Counter, m.ROUNDS, "Engine rounds (draft, schedule, verify, commit)", SPEC)
        self.drafted = wrap(Counter, m.DRAFTED_TOKENS, "Tokens proposed by the drafter", SPEC_GROUP)
        self.verified = wrap(Counter, m.VERIFIED_TOKENS, "Drafted tokens sent to the target", SPEC_GROUP)
        self.truncated = wrap(Counter, m.TRUNCATED_TOKENS, "Drafted tokens not verified", SPEC_GROUP)
        self.accepted = wrap(Counter, m.ACCEPTED_TOKENS, "Verified tokens accepted", SPEC_GROUP)
        self.emitted = wrap(Counter, m.EMITTED_TOKENS, "Tokens committed by decode rounds", SPEC_GROUP)
        by_position = (*SPEC_GROUP, m.LABEL_POSITION)
        self.accepted_pos = wrap(Counter, m.ACCEPTED_PER_POSITION, "Accepted tokens by draft position",
                                 by_position)
        self.verified_pos = wrap(Counter, m.VERIFIED_PER_POSITION,
                                 "Request-rounds that verified the draft position", by_position)
        self.reached_pos = wrap(Counter, m.REACHED_PER_POSITION,
                                "Request-rounds that verified the position and accepted every "
                                "draft before it", by_position)
        self.predicted_pos = wrap(Counter, m.PREDICTED_PER_POSITION,
                                  "Sum of the scheduler's calibrated confidence at reached "
                                  "positions", by_position)
        by_kind = (m.LABEL_TASK_GROUP, m.LABEL_POLICY_MODE, m.LABEL_ROUND_KIND, m.LABEL_BATCH)
        self.decode_seconds = wrap(Counter, m.DECODE_SECONDS,
                                   "Request-seconds of decode rounds without a prefill chunk "
                                   "(round time x rows)", by_kind)
        self.decode_tokens = wrap(Counter, m.DECODE_TOKENS,
                                  "Tokens committed by the rows of decode rounds without a "
                                  "prefill chunk", by_kind)
        self.verified_requests = wrap(Counter, m.VERIFIED_REQUESTS, "Request-rounds verifying >= 1 token",
                                         SPEC)
        self.requests = wrap(Counter, m.REQUESTS, "Finished requests by outcome",
                                ("outcome", m.LABEL_TASK_GROUP))
        self.acceptance_length = wrap(Histogram, m.ACCEPTANCE_LENGTH, "Tokens committed per request per round",
                                           SPEC_GROUP, buckets=LENGTH_BUCKETS)
        self.verify_length = wrap(Histogram, m.VERIFY_LENGTH, "Verified draft tokens per request per round",
                                       SPEC, buckets=LENGTH_BUCKETS)
        self.phase = wrap(Histogram, m.ROUND_PHASE_SECONDS, "Round time by phase", (*SPEC, m.LABEL_PHASE),
                               buckets=PHASE_BUCKETS)
        self.latency = wrap(Histogram, m.REQUEST_LATENCY_SECONDS, "Request latency", (m.LABEL_TASK_GROUP,),
                                 buckets=LATENCY_BUCKETS)
        self.ttft = wrap(Histogram, m.TIME_TO_FIRST_TOKEN_SECONDS, "Time to first token", (m.LABEL_TASK_GROUP,),
                              buckets=LATENCY_BUCKETS)
        self.tpot = wrap(Histogram, m.TIME_PER_OUTPUT_TOKEN_SECONDS, "Time per output token after the first",
                              (m.LABEL_TASK_GROUP,), buckets=PHASE_BUCKETS)
        self.queue_depth = wrap(Gauge, m.QUEUE_DEPTH, "Requests waiting for a KV slot")
        self.running = wrap(Gauge, m.RUNNING_BATCH_SIZE, "Requests holding a KV slot")
        self.kv_usage = wrap(Gauge, m.KV_USAGE, "Fraction of KV cache tokens in use")
        self.policy_info = wrap(Gauge, m.POLICY_INFO, "The policy the engine runs (value 1)",
                                (m.LABEL_POLICY_MODE, m.LABEL_POLICY_VERSION, m.LABEL_DRAFTER))
