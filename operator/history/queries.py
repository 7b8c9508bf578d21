"""Reads of the history store for people: ``kubectl specd history`` and the dashboard.

``rollout_history(session, namespace, service)`` returns plain frozen dataclasses (no ORM
objects escape the session), newest rollout first, each with its events in time order and,
when asked, its analysis measurements. Times come back timezone-aware in UTC whatever the
backend (SQLite keeps them naive). Nothing here writes.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from datetime import UTC, datetime, timedelta

from sqlalchemy import func, select
from sqlalchemy.orm import Session, selectinload

from specd.operator.history.models import (
    Measurement,
    PilotVerdict,
    PolicyChange,
    Rollout,
    RolloutEvent,
)

OPERATOR_ACTOR = "specd-operator"
PROMOTIONS = ("StepPromoted", "Promoted")


def _utc(at: datetime | None) -> datetime | None:
    if at is None:
        return None
    return at.replace(tzinfo=UTC) if at.tzinfo is None else at.astimezone(UTC)


@dataclass(frozen=True)
class EventRecord:
    at: datetime
    step: int  # 0-based index into spec.rollout.steps, as in status.rollout.step
    weight: int
    action: str  # the Kubernetes Event's reason: RolloutStarted, StepPromoted, RolledBack, ...
    actor: str | None
    reason: str | None  # the Event's message


@dataclass(frozen=True)
class MeasurementRecord:
    at: datetime
    step: int
    name: str
    metric: str
    task_group: str  # "" = all traffic
    canary: float | None
    stable: float | None
    value: float | None
    verdict: str
    message: str | None


@dataclass(frozen=True)
class RolloutRecord:
    id: int
    namespace: str
    service: str
    stable: str
    canary: str
    started_at: datetime
    ended_at: datetime | None
    outcome: str | None  # Promoted, RolledBack, Cleared, Superseded; None: in progress
    message: str | None
    events: tuple[EventRecord, ...]
    measurement_count: int
    measurements: tuple[MeasurementRecord, ...] = ()  # only when asked for

    @property
    def in_progress(self) -> bool:
        return self.outcome is None

    def duration(self, now: datetime | None = None) -> timedelta | None:
        """Start to end; for a rollout still in progress, start to ``now`` (None without)."""
        end = self.ended_at or now
        return None if end is None else end - self.started_at

    @property
    def decided_by(self) -> str | None:
        """Who ended it: the users who promoted a promoted rollout (else the operator, on
        analysis and pauses alone), the actor of the rollback (a user's abort, or the
        operator); None for the other outcomes and rollouts still in progress."""
        if self.outcome == "Promoted":
            users = [e.actor for e in self.events if e.action in PROMOTIONS and e.actor]
            return ", ".join(dict.fromkeys(users)) if users else OPERATOR_ACTOR
        if self.outcome == "RolledBack":
            rollback = [e for e in self.events if e.action == "RolledBack"]
            return (rollback[-1].actor or OPERATOR_ACTOR) if rollback else None
        return None


def rollout_history(session: Session, namespace: str, service: str, *,
                    measurements: bool = False, limit: int | None = None
                    ) -> list[RolloutRecord]:
    """Rollouts of one service, newest first (at most ``limit``), with their events."""
    query = (select(Rollout).where(Rollout.namespace == namespace, Rollout.service == service)
             .order_by(Rollout.started_at.desc(), Rollout.id.desc())
             .options(selectinload(Rollout.events)))
    if measurements:
        query = query.options(selectinload(Rollout.measurements))
    if limit is not None:
        query = query.limit(limit)
    rows: Sequence[Rollout] = session.scalars(query).all()
    counts: dict[int, int] = {}
    if rows:
        for rollout_id, count in session.execute(
                select(Measurement.rollout_id, func.count())
                .where(Measurement.rollout_id.in_([r.id for r in rows]))
                .group_by(Measurement.rollout_id)):
            counts[int(rollout_id)] = int(count)
    return [_record(r, counts.get(r.id, 0), measurements) for r in rows]


def rollout_count(session: Session, namespace: str, service: str) -> int:
    return int(session.scalar(select(func.count()).select_from(Rollout).where(
        Rollout.namespace == namespace, Rollout.service == service)) or 0)


def _record(row: Rollout, count: int, with_measurements: bool) -> RolloutRecord:
    events = sorted(row.events, key=lambda e: (_utc(e.at), e.id))
    found = sorted(row.measurements, key=lambda m: (_utc(m.at), m.name, m.task_group, m.id)) \
        if with_measurements else []
    return RolloutRecord(
        id=row.id, namespace=row.namespace, service=row.service, stable=row.stable_version,
        canary=row.canary_version, started_at=_utc(row.started_at),  # type: ignore[arg-type]
        ended_at=_utc(row.ended_at), outcome=row.outcome, message=row.message,
        events=tuple(_event(e) for e in events), measurement_count=count,
        measurements=tuple(_measurement(m) for m in found))


def _event(e: RolloutEvent) -> EventRecord:
    return EventRecord(at=_utc(e.at), step=e.step, weight=e.weight,  # type: ignore[arg-type]
                       action=e.action, actor=e.actor, reason=e.reason)


def _measurement(m: Measurement) -> MeasurementRecord:
    return MeasurementRecord(at=_utc(m.at), step=m.step,  # type: ignore[arg-type]
                             name=m.name, metric=m.metric, task_group=m.task_group,
                             canary=m.canary, stable=m.stable, value=m.value,
                             verdict=m.verdict, message=m.message)


@dataclass(frozen=True)
class PolicyChangeRecord:
    at: datetime
    task_group: str
    action: str  # plain, speculate, shrink, grow, recalibrate
    applied: bool  # False: recommended only (dry run)
    before: dict
    after: dict
    evidence: dict


def policy_changes(session: Session, namespace: str, service: str, *,
                   limit: int | None = None) -> list[PolicyChangeRecord]:
    """The tuner's changes to one service, newest first, with their evidence."""
    query = (select(PolicyChange).where(PolicyChange.namespace == namespace,
                                        PolicyChange.service == service)
             .order_by(PolicyChange.at.desc(), PolicyChange.id.desc()))
    if limit is not None:
        query = query.limit(limit)
    return [PolicyChangeRecord(at=_utc(row.at), task_group=row.task_group,  # type: ignore[arg-type]
                               action=row.reason, applied=bool(row.applied),
                               before=dict(row.before or {}), after=dict(row.after or {}),
                               evidence=dict(row.evidence or {}))
            for row in session.scalars(query).all()]


@dataclass(frozen=True)
class PilotVerdictRecord:
    pilot: str
    started_at: datetime
    task_group: str  # "all": every group together
    decision: str  # adopt, low-load only, reject
    crossover_rps: float | None
    regression_ok: bool
    candidate: str
    reasons: tuple[str, ...]
    evidence: dict


def pilot_verdicts(session: Session, *, pilot: str | None = None,
                   limit: int | None = None) -> list[PilotVerdictRecord]:
    """Pilot verdicts, newest run first (task groups in name order within a run); of one
    pilot's runs only with ``pilot``; at most ``limit`` rows."""
    query = select(PilotVerdict).order_by(PilotVerdict.started_at.desc(),
                                          PilotVerdict.pilot, PilotVerdict.task_group)
    if pilot is not None:
        query = query.where(PilotVerdict.pilot == pilot)
    if limit is not None:
        query = query.limit(limit)
    return [PilotVerdictRecord(pilot=row.pilot, started_at=_utc(row.started_at),  # type: ignore[arg-type]
                               task_group=row.task_group, decision=row.decision,
                               crossover_rps=row.crossover_rps,
                               regression_ok=bool(row.regression_ok), candidate=row.candidate,
                               reasons=tuple(row.reasons or ()),
                               evidence=dict(row.evidence or {}))
            for row in session.scalars(query).all()]
