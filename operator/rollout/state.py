"""The rollout's bookkeeping, kept in ``.status`` (pure conversions).

Everything the state machine needs to resume lives here: the stable and canary versions,
the current step, when its scaling and its pause began, the analysis counts, the pause
reason, whether the rollout was aborted or rolled back, and the control ids already acted
on. Times are epoch seconds in Python and RFC 3339 in the status.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import asdict, dataclass, replace
from datetime import UTC, datetime
from typing import Any, Literal

Phase = Literal["Healthy", "Progressing", "Paused", "Promoting", "RolledBack"]
PauseReason = Literal["StepPause", "UserPaused", "Inconclusive", "AnalysisFailed",
                      "ProgressDeadlineExceeded"]


@dataclass(frozen=True)
class RolloutState:
    stable: str | None = None  # the version (revision, or revision+policy) on the stable track
    canary: str | None = None  # the version being rolled out; None when none is
    started_at: float | None = None  # when this version's rollout began (its history key)
    step: int = 0
    scaled_at: float | None = None  # when the current step's scaling began
    step_started_at: float | None = None  # when its pods were all Ready (the pause began)
    analysed_at: float | None = None  # the step's last analysis run
    successful: int = 0
    failed: int = 0
    inconclusive: int = 0
    errors: int = 0  # consecutive
    pause_reason: PauseReason | None = None
    aborted: bool = False
    last_promote_id: str | None = None
    last_retry: str | None = None
    last_resume: str | None = None
    phase: Phase = "Healthy"
    message: str = ""

    def at_step(self, step: int, now: float) -> RolloutState:
        """The same rollout at ``step``, with a fresh step's clock and counts."""
        return replace(self, step=step, scaled_at=now, step_started_at=None, analysed_at=None,
                       successful=0, failed=0, inconclusive=0, errors=0, pause_reason=None)


def _time(value: float | None) -> str | None:
    if value is None:
        return None
    return datetime.fromtimestamp(value, UTC).strftime("%Y-%m-%dT%H:%M:%SZ")


def _epoch(value: Any) -> float | None:
    if not value:
        return None
    return datetime.strptime(str(value), "%Y-%m-%dT%H:%M:%SZ").replace(tzinfo=UTC).timestamp()


# status.rollout keys (camelCase) <-> fields
_KEYS = {"stable": "stableVersion", "canary": "canaryVersion", "started_at": "startedAt",
         "step": "step",
         "scaled_at": "scaledAt", "step_started_at": "stepStartedAt",
         "analysed_at": "analysedAt",
         "successful": "successfulChecks", "failed": "failedChecks",
         "inconclusive": "inconclusiveChecks", "errors": "errorChecks",
         "pause_reason": "pauseReason", "aborted": "aborted",
         "last_promote_id": "lastPromoteId", "last_retry": "lastRetry",
         "last_resume": "lastResume", "phase": "phase",
         "message": "message"}
_TIMES = ("started_at", "scaled_at", "step_started_at", "analysed_at")


def to_status(state: RolloutState) -> dict[str, Any]:
    """``status.rollout`` (None values clear a field in a merge patch)."""
    out: dict[str, Any] = {}
    for field, value in asdict(state).items():
        out[_KEYS[field]] = _time(value) if field in _TIMES else value
    return out


def from_status(rollout: Mapping[str, Any] | None) -> RolloutState:
    rollout = rollout or {}
    values: dict[str, Any] = {}
    for field, key in _KEYS.items():
        if key in rollout and rollout[key] is not None:
            values[field] = _epoch(rollout[key]) if field in _TIMES else rollout[key]
    return RolloutState(**values)
