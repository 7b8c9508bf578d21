"""The canary state machine (pure): one call per reconcile tick.

    plan = advance(config, replicas, desired, state, seen, now, measure)

``desired`` is the version the spec asks for (the pod revision, or revision + policy version
when policy changes are canaried); ``state`` the bookkeeping read from ``.status``; ``seen``
what the two Deployments report; ``measure`` runs the step's analysis (the caller's
Prometheus queries) and is called only when a measurement is due. The plan names the version
and replicas of each track, the new state to write back and the events to post. Given the
same inputs and measurements a tick gives the same plan, so a restarted operator resumes.

A rollout, step by step: scale the tracks to the step's weight -> wait until both are Ready
(the progress deadline fails the step) -> the pause (a duration, or until a promote), with
analysis every interval -> the next step. A step never passes on no data: with analysis
configured it needs at least one Successful measurement. After the last step, promotion: the
stable track takes the new version, and once it is Ready the canary is removed. A rollback
(failed analysis with automaticRollback, abort, or the inconclusive policy) scales the canary
to 0 and keeps everything on the stable version until a retry or a spec edit.

Measurements: Failed counts against failureLimit; Inconclusive (no series, zero denominator,
too few samples) against inconclusiveLimit, then inconclusivePolicy; Error (Prometheus down,
query refused) is counted apart and never rolls back: past ``error_limit`` consecutive errors
it counts as one Inconclusive.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass, field, replace
from typing import Literal

from specd.api.spec import RolloutSpec
from specd.operator.rollout.split import split_replicas
from specd.operator.rollout.state import RolloutState

Verdict = Literal["Successful", "Failed", "Inconclusive", "Error"]
DEFAULT_PROGRESS_DEADLINE_S = 600.0
DEFAULT_ERROR_LIMIT = 4
REQUEUE_S = 2.0

_DURATION = re.compile(r"(\d+(?:\.\d+)?)(ms|s|m|h)")
_UNIT = {"ms": 0.001, "s": 1.0, "m": 60.0, "h": 3600.0}


def parse_duration(text: str) -> float:
    """``30s``, ``5m``, ``1h30m``, ``500ms`` -> seconds (the CRD's pattern)."""
    parts = _DURATION.findall(text)
    if not parts or "".join(n + u for n, u in parts) != text:
        raise ValueError(f"bad duration {text!r} (e.g. 30s, 5m, 1h30m)")
    return sum(float(n) * _UNIT[u] for n, u in parts)


@dataclass(frozen=True)
class Step:
    weight: int
    pause_s: float | None = None  # wait this long once Ready
    until_promoted: bool = False  # pause: {} -- wait for a promote


@dataclass(frozen=True)
class Config:
    """What the state machine reads of ``spec.rollout``."""

    steps: tuple[Step, ...]
    analysis: bool = False  # metrics are configured
    interval_s: float = 60.0
    failure_limit: int = 0
    inconclusive_limit: int = 1
    inconclusive_policy: Literal["Pause", "Rollback", "Promote"] = "Pause"
    automatic_rollback: bool = True
    progress_deadline_s: float = DEFAULT_PROGRESS_DEADLINE_S
    error_limit: int = DEFAULT_ERROR_LIMIT
    paused: bool = False
    abort: bool = False
    promote_id: str | None = None
    promote_full: bool = False
    retry: str | None = None
    resume: str | None = None

    @classmethod
    def from_spec(cls, rollout: RolloutSpec,
                  progress_deadline_s: float = DEFAULT_PROGRESS_DEADLINE_S) -> Config:
        steps = []
        for step in rollout.steps:
            if step.pause is None:
                steps.append(Step(step.weight))
            elif step.pause.duration:
                steps.append(Step(step.weight, pause_s=parse_duration(step.pause.duration)))
            else:
                steps.append(Step(step.weight, until_promoted=True))
        analysis = rollout.analysis
        return cls(
            steps=tuple(steps),
            analysis=bool(analysis and (analysis.metrics or analysis.probes is not None)),
            interval_s=parse_duration(analysis.interval) if analysis else 60.0,
            failure_limit=analysis.failure_limit if analysis else 0,
            inconclusive_limit=analysis.inconclusive_limit if analysis else 1,
            inconclusive_policy=rollout.inconclusive_policy,
            automatic_rollback=rollout.automatic_rollback,
            progress_deadline_s=progress_deadline_s,
            paused=rollout.paused, abort=rollout.abort,
            promote_id=rollout.promote.id if rollout.promote else None,
            promote_full=bool(rollout.promote and rollout.promote.full),
            retry=rollout.retry, resume=rollout.resume)


@dataclass(frozen=True)
class Seen:
    """What the Deployments report now."""

    stable_version: str | None
    stable_ready: int
    canary_version: str | None = None
    canary_ready: int = 0


@dataclass(frozen=True)
class Measurement:
    verdict: Verdict
    message: str = ""


@dataclass(frozen=True)
class Track:
    version: str
    replicas: int


@dataclass(frozen=True)
class Event:
    type: Literal["Normal", "Warning"]
    reason: str
    message: str


@dataclass(frozen=True)
class Plan:
    stable: Track
    canary: Track | None  # None: no canary Deployment at all
    state: RolloutState
    weight: int = 0  # the set weight
    events: tuple[Event, ...] = field(default_factory=tuple)
    requeue_after: float | None = None


Measure = Callable[[], Measurement]


def advance(config: Config, replicas: int, desired: str, state: RolloutState, seen: Seen,
            now: float, measure: Measure | None = None) -> Plan:
    return _Tick(config, replicas, desired, state, seen, now, measure).run()


class _Tick:
    def __init__(self, config: Config, replicas: int, desired: str, state: RolloutState,
                 seen: Seen, now: float, measure: Measure | None) -> None:
        self.c, self.replicas, self.desired, self.seen, self.now = (config, replicas, desired,
                                                                    seen, now)
        self.measure = measure
        self.s = state
        self.events: list[Event] = []

    def event(self, kind: Literal["Normal", "Warning"], reason: str, message: str) -> None:
        self.events.append(Event(kind, reason, message))

    def plan(self, canary: Track | None, weight: int = 0, requeue: float | None = None) -> Plan:
        assert self.s.stable is not None
        stable_replicas = self.replicas if canary is None or canary.replicas == 0 else \
            split_replicas(self.replicas, weight)[0]
        return Plan(Track(self.s.stable, stable_replicas), canary, self.s, weight,
                    tuple(self.events), requeue)

    # ---- the tick ------------------------------------------------------------------------

    def run(self) -> Plan:
        c, s = self.c, self.s
        if s.stable is None:  # first deployment: nothing to compare with, no canary
            self.s = RolloutState(stable=self.desired, phase="Healthy",
                                  message=f"{self.replicas} workers at {self.desired}")
            return self.plan(None)
        if self.desired == s.stable:
            return self._settled()
        if s.canary != self.desired:
            restarted = s.canary is not None
            self.s = replace(s, canary=self.desired, aborted=False, phase="Progressing",
                             started_at=self.now,
                             message=f"rolling out {self.desired}").at_step(0, self.now)
            self.event("Normal", "RolloutRestarted" if restarted else "RolloutStarted",
                       f"{'new revision mid-rollout: ' if restarted else ''}canary "
                       f"{self.desired} against stable {s.stable}, step 1/{len(c.steps)}")
        if self.s.aborted:
            if c.retry and c.retry != self.s.last_retry:
                self.s = replace(self.s, aborted=False, last_retry=c.retry,
                                 phase="Progressing").at_step(0, self.now)
                self.event("Normal", "RolloutRetried", f"retry {c.retry}: back to step 1")
            else:
                return self.plan(Track(self.desired, 0))
        if c.abort:
            return self._rollback("Aborted", "aborted by a user (spec.rollout.abort)")
        if c.promote_id and c.promote_id != self.s.last_promote_id:
            target = len(c.steps) if c.promote_full else self.s.step + 1
            self.s = replace(self.s, last_promote_id=c.promote_id).at_step(target, self.now)
            self.event("Normal", "Promoted" if c.promote_full else "StepPromoted",
                       "promoted to stable by a user" if c.promote_full else
                       f"promoted by a user to step {min(target, len(c.steps)) + 1}")
        if c.resume and c.resume != self.s.last_resume and \
                self.s.pause_reason in ("Inconclusive", "AnalysisFailed",
                                        "ProgressDeadlineExceeded"):
            self.s = replace(self.s.at_step(self.s.step, self.now), last_resume=c.resume)
            self.event("Normal", "Resumed", "resumed by a user: the step starts again")
        if self.s.step >= len(c.steps):
            return self._promote()
        return self._step()

    def _settled(self) -> Plan:
        s = self.s
        if s.canary is not None or s.aborted:
            self.event("Normal", "RolloutCleared",
                       f"the spec names the stable version {s.stable} again")
        healthy = self.seen.stable_version == s.stable and self.seen.stable_ready >= self.replicas
        self.s = RolloutState(stable=s.stable, last_promote_id=s.last_promote_id,
                              last_retry=s.last_retry, last_resume=s.last_resume,
                              phase="Healthy" if healthy else "Progressing",
                              message=f"{self.seen.stable_ready}/{self.replicas} workers ready "
                                      f"at {s.stable}")
        return self.plan(None, requeue=None if healthy else REQUEUE_S)

    def _promote(self) -> Plan:
        s = self.s
        last = self.c.steps[-1].weight if self.c.steps else 100
        canary = Track(self.desired, split_replicas(self.replicas, last)[1])
        if self.seen.stable_version == self.desired and self.seen.stable_ready >= self.replicas:
            self.event("Normal", "RolloutCompleted",
                       f"{self.desired} is stable ({self.replicas} workers); canary removed")
            self.s = RolloutState(stable=self.desired, last_promote_id=s.last_promote_id,
                                  last_retry=s.last_retry, last_resume=s.last_resume,
                                  phase="Healthy", message=f"promoted {self.desired}")
            return self.plan(None)
        self.s = replace(s, phase="Promoting", pause_reason=None,
                         message=f"promoting {self.desired}: stable track "
                                 f"{self.seen.stable_ready}/{self.replicas} ready")
        # the stable track rolls to the new version at full size; the canary keeps serving
        return Plan(Track(self.desired, self.replicas), canary, self.s, 100,
                    tuple(self.events), REQUEUE_S)

    def _step(self) -> Plan:
        c, index = self.c, self.s.step
        step = c.steps[index]
        stable_n, canary_n = split_replicas(self.replicas, step.weight)
        canary = Track(self.desired, canary_n)
        label = f"step {index + 1}/{len(c.steps)} ({step.weight}%)"
        if self.s.scaled_at is None:
            self.s = replace(self.s, scaled_at=self.now)
        if c.paused:
            self.s = replace(self.s, phase="Paused", pause_reason="UserPaused",
                             message=f"paused by a user at {label}")
            return self.plan(canary, step.weight)
        if self.s.pause_reason == "UserPaused":
            self.s = replace(self.s, pause_reason=None, phase="Progressing")
            self.event("Normal", "Resumed", f"resumed by a user at {label}")
        if self.s.pause_reason in ("Inconclusive", "AnalysisFailed", "ProgressDeadlineExceeded"):
            return self.plan(canary, step.weight)  # held until promote, abort, resume or retry
        ready = (self.seen.canary_version == self.desired and self.seen.canary_ready >= canary_n
                 and self.seen.stable_version == self.s.stable
                 and self.seen.stable_ready >= stable_n)
        if not ready and self.s.step_started_at is None:
            assert self.s.scaled_at is not None
            if self.now - self.s.scaled_at > c.progress_deadline_s:
                return self._fail("ProgressDeadlineExceeded",
                                  f"{label}: workers not Ready within "
                                  f"{c.progress_deadline_s:.0f}s (canary "
                                  f"{self.seen.canary_ready}/{canary_n}, stable "
                                  f"{self.seen.stable_ready}/{stable_n})", canary, step.weight)
            self.s = replace(self.s, phase="Progressing",
                             message=f"{label}: waiting for workers (canary "
                                     f"{self.seen.canary_ready}/{canary_n} ready)")
            return self.plan(canary, step.weight, requeue=REQUEUE_S)
        if self.s.step_started_at is None:
            self.s = replace(self.s, step_started_at=self.now)
        due = c.analysis and (self.s.analysed_at is None
                              or self.now - self.s.analysed_at >= c.interval_s)
        if due and self.measure is not None:
            outcome = self._measured(self.measure(), canary, step.weight, label)
            if outcome is not None:
                return outcome
        if step.until_promoted:
            self.s = replace(self.s, phase="Paused", pause_reason="StepPause",
                             message=f"{label}: waiting for a promote")
            return self.plan(canary, step.weight, requeue=self._next_analysis())
        assert self.s.step_started_at is not None
        elapsed = self.now - self.s.step_started_at
        if step.pause_s is not None and elapsed < step.pause_s:
            self.s = replace(self.s, phase="Progressing",
                             message=f"{label}: paused {elapsed:.0f}/{step.pause_s:.0f}s")
            wait = step.pause_s - elapsed
            next_analysis = self._next_analysis()
            return self.plan(canary, step.weight, requeue=wait if next_analysis is None
                             else min(wait, next_analysis))
        if c.analysis and self.s.successful == 0:
            self.s = replace(self.s, phase="Progressing",
                             message=f"{label}: waiting for a successful analysis "
                                     f"({self.s.inconclusive} inconclusive, "
                                     f"{self.s.errors} errors so far)")
            return self.plan(canary, step.weight, requeue=self._next_analysis())
        self.event("Normal", "StepCompleted", f"{label} passed")
        self.s = replace(self.s, phase="Progressing").at_step(index + 1, self.now)
        if self.s.step >= len(c.steps):
            return self._promote()
        self.measure = None  # one measurement per tick: the next step's first comes later
        return self._step()

    def _next_analysis(self) -> float | None:
        if not self.c.analysis:
            return None
        if self.s.analysed_at is None:
            return 0.0
        return max(0.0, self.s.analysed_at + self.c.interval_s - self.now)

    def _measured(self, m: Measurement, canary: Track, weight: int, label: str) -> Plan | None:
        c, s = self.c, replace(self.s, analysed_at=self.now)
        if m.verdict == "Successful":
            s = replace(s, successful=s.successful + 1, errors=0)
        elif m.verdict == "Failed":
            s = replace(s, failed=s.failed + 1, errors=0)
        elif m.verdict == "Inconclusive":
            s = replace(s, inconclusive=s.inconclusive + 1, errors=0)
        else:
            s = replace(s, errors=s.errors + 1)
            if s.errors > c.error_limit:  # errors alone never roll back
                s = replace(s, errors=0, inconclusive=s.inconclusive + 1)
        self.s = s
        if s.failed > c.failure_limit:
            return self._fail("AnalysisFailed", f"{label}: {m.message}", canary, weight)
        if s.inconclusive > c.inconclusive_limit:
            why = f"{label}: analysis inconclusive {s.inconclusive} times ({m.message})"
            if c.inconclusive_policy == "Rollback":
                return self._rollback("InconclusiveAnalysis", why)
            if c.inconclusive_policy == "Pause":
                self.s = replace(s, phase="Paused", pause_reason="Inconclusive", message=why)
                self.event("Warning", "AnalysisInconclusive", why)
                return self.plan(canary, weight)
            self.event("Warning", "AnalysisInconclusive", f"{why}; promoting (policy)")
            self.s = replace(s, successful=max(1, s.successful))
        return None

    def _fail(self, reason: str, message: str, canary: Track, weight: int) -> Plan:
        if self.c.automatic_rollback:
            return self._rollback(reason, message)
        self.s = replace(self.s, phase="Paused",
                         pause_reason="ProgressDeadlineExceeded"
                         if reason == "ProgressDeadlineExceeded" else "AnalysisFailed",
                         message=message)
        self.event("Warning", reason, f"{message}; paused (automaticRollback is off)")
        return self.plan(canary, weight)

    def _rollback(self, reason: str, message: str) -> Plan:
        self.s = replace(self.s, aborted=True, phase="RolledBack", pause_reason=None,
                         message=f"{reason}: {message}")
        self.event("Warning", "RolledBack", f"{reason}: {message}; all traffic on "
                                            f"{self.s.stable}")
        return self.plan(Track(self.desired, 0))
