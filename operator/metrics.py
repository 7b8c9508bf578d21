"""The operator's own Prometheus metrics (reconcile counts, durations, API errors)."""

from __future__ import annotations

from prometheus_client import CollectorRegistry, Counter, Gauge, Histogram, start_http_server

REGISTRY = CollectorRegistry()

RECONCILES = Counter(
    "specd_operator_reconciles", "Reconciles of SpeculativeServices by trigger and result "
    "(ok, config_error, transient_error)", ["trigger", "result"], registry=REGISTRY)
RECONCILE_SECONDS = Histogram(
    "specd_operator_reconcile_seconds", "Time to reconcile one SpeculativeService",
    buckets=(0.01, 0.025, 0.05, 0.1, 0.25, 0.5, 1, 2.5, 5, 10), registry=REGISTRY)
API_ERRORS = Counter(
    "specd_operator_api_errors", "Kubernetes API errors by kind (transient or config)",
    ["kind"], registry=REGISTRY)
STATUS_WRITES = Counter(
    "specd_operator_status_writes", "Status patches written (no-op writes are skipped)",
    registry=REGISTRY)
ROLLOUT_EVENTS = Counter(
    "specd_operator_rollout_events", "Rollout transitions by reason (RolloutStarted, "
    "StepCompleted, RolledBack, RolloutCompleted, ...)", ["reason"], registry=REGISTRY)
MEASUREMENTS = Counter(
    "specd_operator_analysis_measurements", "Canary analysis results by verdict (Successful, "
    "Failed, Inconclusive, Error), one per metric and task group", ["verdict"],
    registry=REGISTRY)
ROLLOUT_STEP = Gauge(
    "specd_operator_rollout_step", "Current canary step (0-based; the step count while "
    "promoting)", ["namespace", "service"], registry=REGISTRY)
ROLLOUT_SET_WEIGHT = Gauge(
    "specd_operator_rollout_set_weight", "Weight of the current canary step (percent)",
    ["namespace", "service"], registry=REGISTRY)
ROLLOUT_PHASE = Gauge(
    "specd_operator_rollout_phase", "1 for the rollout's phase (Healthy, Progressing, Paused, "
    "Promoting, RolledBack), 0 for the others", ["namespace", "service", "phase"],
    registry=REGISTRY)
ROLLOUT_PHASES = ("Healthy", "Progressing", "Paused", "Promoting", "RolledBack")
STORE_WRITE_ERRORS = Counter(
    "specd_operator_store_write_errors", "History-store writes given up on (kind: write, "
    "queue_full, migrate); the rollouts go on regardless", ["kind"], registry=REGISTRY)
POLICY_CHANGES = Counter(
    "specd_operator_policy_changes", "Verification-policy changes the tuner made (applied="
    "true) or recommended under dryRun (false), by reason (plain, speculate, shrink, grow)",
    ["reason", "applied"], registry=REGISTRY)
SERVICES = Gauge(
    "specd_operator_services", "SpeculativeServices by phase, as last written by this operator",
    ["phase"], registry=REGISTRY)


def serve(port: int, address: str) -> None:
    """Expose /metrics on ``address:port`` from a daemon thread."""
    start_http_server(port, addr=address, registry=REGISTRY)


def record_rollout(namespace: str, service: str, phase: str | None, step: int,
                   weight: int) -> None:
    """The rollout gauges of one service; ``phase`` None removes its series."""
    for name in ROLLOUT_PHASES:
        if phase is None:
            try:
                ROLLOUT_PHASE.remove(namespace, service, name)
            except KeyError:
                pass
        else:
            ROLLOUT_PHASE.labels(namespace, service, name).set(1 if name == phase else 0)
    for gauge, value in ((ROLLOUT_STEP, step), (ROLLOUT_SET_WEIGHT, weight)):
        if phase is None:
            try:
                gauge.remove(namespace, service)
            except KeyError:
                pass
        else:
            gauge.labels(namespace, service).set(value)
