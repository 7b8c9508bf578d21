"""Metric and label names shared by the worker (exporter), operator and dashboard (readers).

Counter meanings mirror vLLM's spec-decode metrics where they overlap
(``vllm:spec_decode_num_draft_tokens`` ~ drafted, ``..._num_accepted_tokens`` ~ accepted,
``..._num_accepted_tokens_per_pos`` ~ accepted per position), so PromQL recipes carry over.

PromQL recipes (rate windows are examples):

- acceptance rate:      sum(rate(specd_accepted_tokens_total[1m])) / sum(rate(specd_verified_tokens_total[1m]))
- draft acceptance:     sum(rate(specd_accepted_tokens_total[1m])) / sum(rate(specd_drafted_tokens_total[1m]))
- truncation ratio:     sum(rate(specd_truncated_tokens_total[1m])) / sum(rate(specd_drafted_tokens_total[1m]))
- mean acceptance length tau:
                        sum(rate(specd_acceptance_length_sum[1m])) / sum(rate(specd_acceptance_length_count[1m]))
- per-position acceptance:
                        sum by (position) (rate(specd_accepted_per_position_total[1m]))
                          / ignoring(position) group_left sum(rate(specd_verified_requests_total[1m]))
- conditional acceptance of position i by task group (given position i was reached: verified,
  every earlier draft accepted), and what the scheduler predicted for it (calibration):
                        sum by (task_group, position) (rate(specd_accepted_per_position_total[5m]))
                          / sum by (task_group, position) (rate(specd_reached_per_position_total[5m]))
                        sum by (task_group, position) (rate(specd_predicted_per_position_total[5m]))
                          / sum by (task_group, position) (rate(specd_reached_per_position_total[5m]))
- per-request goodput (committed tokens per second of decode round; rounds that also
  prefill a chunk are left out of both counters) by group, round kind (speculative, or
  plain: the true-plain reference) and batch-size bucket:
                        sum by (task_group, round_kind, batch) (rate(specd_decode_tokens_total[5m]))
                          / sum by (task_group, round_kind, batch) (rate(specd_decode_seconds_total[5m]))
- p95 request latency by task group:
                        histogram_quantile(0.95, sum by (le, task_group) (rate(specd_request_latency_seconds_bucket[5m])))
- round phase time share:
                        sum by (phase) (rate(specd_round_phase_seconds_sum[1m]))
"""

from __future__ import annotations

PREFIX = "specd_"

# counters (prometheus_client appends _total)
ROUNDS = "specd_rounds"
DRAFTED_TOKENS = "specd_drafted_tokens"
VERIFIED_TOKENS = "specd_verified_tokens"
TRUNCATED_TOKENS = "specd_truncated_tokens"
ACCEPTED_TOKENS = "specd_accepted_tokens"
EMITTED_TOKENS = "specd_emitted_tokens"
ACCEPTED_PER_POSITION = "specd_accepted_per_position"  # label: position (1-based)
VERIFIED_PER_POSITION = "specd_verified_per_position"  # request-rounds verifying position i
REACHED_PER_POSITION = "specd_reached_per_position"  # ... and accepting every draft before it
PREDICTED_PER_POSITION = "specd_predicted_per_position"  # sum of the predicted c(r, i) there
# request-seconds and committed tokens of decode rounds (labels: round_kind, batch)
DECODE_SECONDS = "specd_decode_seconds"
DECODE_TOKENS = "specd_decode_tokens"
VERIFIED_REQUESTS = "specd_verified_requests"  # request-rounds that verified >= 1 token
REQUESTS = "specd_requests"  # label: outcome (finished|cancelled|rejected|error)
POLICY_RELOAD_ERRORS = "specd_policy_reload_errors"

# histograms
ACCEPTANCE_LENGTH = "specd_acceptance_length"  # tau per request per round
VERIFY_LENGTH = "specd_verify_length"  # verified tokens per request per round
ROUND_PHASE_SECONDS = "specd_round_phase_seconds"  # label: phase
REQUEST_LATENCY_SECONDS = "specd_request_latency_seconds"
TIME_TO_FIRST_TOKEN_SECONDS = "specd_time_to_first_token_seconds"
TIME_PER_OUTPUT_TOKEN_SECONDS = "specd_time_per_output_token_seconds"

# gauges
QUEUE_DEPTH = "specd_queue_depth"
RUNNING_BATCH_SIZE = "specd_running_batch_size"
KV_USAGE = "specd_kv_usage_ratio"
POLICY_INFO = "specd_policy_info"  # value 1, labels carry the policy version and mode

PHASES = ("draft", "schedule", "verify", "commit")

# labels
LABEL_REVISION = "revision"
LABEL_TRACK = "track"
LABEL_DRAFTER = "drafter"
LABEL_POLICY_MODE = "policy_mode"
LABEL_POLICY_VERSION = "policy_version"
LABEL_TASK_GROUP = "task_group"
LABEL_POSITION = "position"
LABEL_PHASE = "phase"
LABEL_ROUND_KIND = "round_kind"  # speculative | plain (no request drafted)
LABEL_BATCH = "batch"  # decoding requests in the round, rounded up to a power of two
ROUND_KINDS = ("speculative", "plain")

# Task groups: a bounded label set (seed 003); unknown names fold into "other".
TASK_GROUPS = ("chat", "code", "structured", "long-form", "other")
TASK_GROUP_HEADER = "X-Specd-Task-Group"


def task_group(name: str | None) -> str:
    """Fold a client-supplied task group into the bounded label set."""
    if not name:
        return "other"
    name = name.strip().lower()
    return name if name in TASK_GROUPS else "other"
