"""Prometheus metrics of the engine, named per ``specd.api.metrics``. The registry is passed
in (tests make their own; the server passes the process registry)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram
from specd.api import metrics as m

SPEC = (m.LABEL_DRAFTER, m.LABEL_POLICY_MODE, m.LABEL_POLICY_VERSION)
SPEC_GROUP = (*SPEC, m.LABEL_TASK_GROUP)
LENGTH_BUCKETS = tuple(float(i) for i in range(0, 18))
PHASE_BUCKETS = (0.0005, 0.001, 0.0025, 0.005, 0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1.0, 2.5)
LATENCY_BUCKETS = (0.05, 0.1, 0.25, 0.5, 1.0, 2.5, 5.0, 10.0, 30.0, 60.0, 120.0)

class EngineMetrics:
    def __init__(self, registry: CollectorRegistry | None = None) -> None:
        r = registry if registry is not None else CollectorRegistry()
        self.registry = r
        self.rounds = Counter(m.ROUNDS, "Engine rounds (draft, schedule, verify, commit)", SPEC, registry=r)
        self.drafted = Counter(m.DRAFTED_TOKENS, "Tokens proposed by the drafter", SPEC_GROUP, registry=r)
        self.verified = Counter(m.VERIFIED_TOKENS, "Drafted tokens sent to the target", SPEC_GROUP, registry=r)
        self.truncated = Counter(m.TRUNCATED_TOKENS, "Drafted tokens not verified", SPEC_GROUP, registry=r)
        self.accepted = Counter(m.ACCEPTED_TOKENS, "Verified tokens accepted", SPEC_GROUP, registry=r)
        self.emitted = Counter(m.EMITTED_TOKENS, "Tokens committed by decode rounds", SPEC_GROUP, registry=r)
        self.accepted_pos = Counter(m.ACCEPTED_PER_POSITION, "Accepted tokens by draft position",
                                    (*SPEC, m.LABEL_POSITION), registry=r)
        self.verified_requests = Counter(m.VERIFIED_REQUESTS, "Request-rounds verifying >= 1 token",
                                         SPEC, registry=r)
        self.requests = Counter(m.REQUESTS, "Finished requests by outcome",
                                ("outcome", m.LABEL_TASK_GROUP), registry=r)
        self.acceptance_length = Histogram(m.ACCEPTANCE_LENGTH, "Tokens committed per request per round",
                                           SPEC_GROUP, buckets=LENGTH_BUCKETS, registry=r)
        self.verify_length = Histogram(m.VERIFY_LENGTH, "Verified draft tokens per request per round",
                                       SPEC, buckets=LENGTH_BUCKETS, registry=r)
        self.phase = Histogram(m.ROUND_PHASE_SECONDS, "Round time by phase", (*SPEC, m.LABEL_PHASE),
                               buckets=PHASE_BUCKETS, registry=r)
        self.latency = Histogram(m.REQUEST_LATENCY_SECONDS, "Request latency", (m.LABEL_TASK_GROUP,),
                                 buckets=LATENCY_BUCKETS, registry=r)
        self.ttft = Histogram(m.TIME_TO_FIRST_TOKEN_SECONDS, "Time to first token", (m.LABEL_TASK_GROUP,),
                              buckets=LATENCY_BUCKETS, registry=r)
        self.tpot = Histogram(m.TIME_PER_OUTPUT_TOKEN_SECONDS, "Time per output token after the first",
                              (m.LABEL_TASK_GROUP,), buckets=PHASE_BUCKETS, registry=r)
        self.queue_depth = Gauge(m.QUEUE_DEPTH, "Requests waiting for a KV slot", registry=r)
        self.running = Gauge(m.RUNNING_BATCH_SIZE, "Requests holding a KV slot", registry=r)
        self.kv_usage = Gauge(m.KV_USAGE, "Fraction of KV cache tokens in use", registry=r)
        self.policy_info = Gauge(m.POLICY_INFO, "The policy the engine runs (value 1)",
                                 (m.LABEL_POLICY_MODE, m.LABEL_POLICY_VERSION, m.LABEL_DRAFTER),
                                 registry=r)
