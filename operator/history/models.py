"""Tables of the history store (SQLAlchemy 2.0 declarative models).

Idempotency lives in the schema: every row has a natural key (unique constraint) built from
what the operator knows deterministically -- the object's uid, the version rolled out, the
rollout's start time, the event's reason and step, the measurement's time and metric -- so a
write repeated after a crash is a no-op, not a duplicate.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from sqlalchemy import JSON, DateTime, Float, ForeignKey, Integer, String, Text, UniqueConstraint
from sqlalchemy.orm import DeclarativeBase, Mapped, mapped_column, relationship


class Base(DeclarativeBase):
    pass


class Rollout(Base):
    """One rollout of one version of one SpeculativeService."""

    __tablename__ = "rollouts"
    __table_args__ = (UniqueConstraint("service_uid", "canary_version", "started_at",
                                       name="uq_rollouts_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(String(253), index=True)
    service: Mapped[str] = mapped_column(String(253), index=True)
    service_uid: Mapped[str] = mapped_column(String(64))
    stable_version: Mapped[str] = mapped_column(String(128))
    canary_version: Mapped[str] = mapped_column(String(128))
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    ended_at: Mapped[datetime | None] = mapped_column(DateTime(timezone=True), nullable=True)
    outcome: Mapped[str | None] = mapped_column(String(32), nullable=True)  # Promoted, ...
    message: Mapped[str | None] = mapped_column(Text, nullable=True)

    events: Mapped[list[RolloutEvent]] = relationship(back_populates="rollout",
                                                      order_by="RolloutEvent.at")
    measurements: Mapped[list[Measurement]] = relationship(back_populates="rollout")


class RolloutEvent(Base):
    """A transition or a control: step, weight, action (the event's reason), actor, reason."""

    __tablename__ = "rollout_events"
    __table_args__ = (UniqueConstraint("rollout_id", "at", "action", "step",
                                       name="uq_rollout_events_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rollout_id: Mapped[int] = mapped_column(ForeignKey("rollouts.id", ondelete="CASCADE"),
                                            index=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    step: Mapped[int] = mapped_column(Integer)
    weight: Mapped[int] = mapped_column(Integer)
    action: Mapped[str] = mapped_column(String(64))
    actor: Mapped[str | None] = mapped_column(String(253), nullable=True)
    reason: Mapped[str | None] = mapped_column(Text, nullable=True)

    rollout: Mapped[Rollout] = relationship(back_populates="events")


class Measurement(Base):
    """One analysis result: metric, task group, query, canary and stable values, verdict."""

    __tablename__ = "analysis_measurements"
    __table_args__ = (UniqueConstraint("rollout_id", "at", "name", "task_group",
                                       name="uq_measurements_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    rollout_id: Mapped[int] = mapped_column(ForeignKey("rollouts.id", ondelete="CASCADE"),
                                            index=True)
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    step: Mapped[int] = mapped_column(Integer)
    name: Mapped[str] = mapped_column(String(63))
    metric: Mapped[str] = mapped_column(String(32))
    task_group: Mapped[str] = mapped_column(String(32), default="")  # "" = all traffic
    query: Mapped[str | None] = mapped_column(Text, nullable=True)
    window: Mapped[str] = mapped_column(String(32))
    canary: Mapped[float | None] = mapped_column(Float, nullable=True)
    stable: Mapped[float | None] = mapped_column(Float, nullable=True)
    value: Mapped[float | None] = mapped_column(Float, nullable=True)
    verdict: Mapped[str] = mapped_column(String(16))
    message: Mapped[str | None] = mapped_column(Text, nullable=True)

    rollout: Mapped[Rollout] = relationship(back_populates="measurements")


class PolicyChange(Base):
    """A verification-policy change the tuner made (or recommended), with its evidence."""

    __tablename__ = "policy_changes"
    __table_args__ = (UniqueConstraint("service_uid", "task_group", "at",
                                       name="uq_policy_changes_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    namespace: Mapped[str] = mapped_column(String(253), index=True)
    service: Mapped[str] = mapped_column(String(253), index=True)
    service_uid: Mapped[str] = mapped_column(String(64))
    task_group: Mapped[str] = mapped_column(String(32))
    at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    reason: Mapped[str] = mapped_column(String(64))
    applied: Mapped[int] = mapped_column(Integer, default=1)  # 0: dry run (recommended only)
    before: Mapped[dict[str, Any]] = mapped_column(JSON)
    after: Mapped[dict[str, Any]] = mapped_column(JSON)
    evidence: Mapped[dict[str, Any]] = mapped_column(JSON)


class PilotVerdict(Base):
    """One task group's verdict from one ``specd pilot`` run: adopt (within a load range),
    low-load only, or reject, against the better of the plain service and its equal-resource
    alternative, with the reasons and the per-trace evidence of the report."""

    __tablename__ = "pilot_verdicts"
    __table_args__ = (UniqueConstraint("pilot", "started_at", "task_group",
                                       name="uq_pilot_verdicts_key"),)

    id: Mapped[int] = mapped_column(Integer, primary_key=True, autoincrement=True)
    pilot: Mapped[str] = mapped_column(String(253), index=True)  # the pilot file's name
    started_at: Mapped[datetime] = mapped_column(DateTime(timezone=True))
    task_group: Mapped[str] = mapped_column(String(32))  # "all": every group together
    decision: Mapped[str] = mapped_column(String(32))  # adopt, low-load only, reject
    crossover_rps: Mapped[float | None] = mapped_column(Float, nullable=True)
    regression_ok: Mapped[int] = mapped_column(Integer)  # the business regression passed
    candidate: Mapped[str] = mapped_column(Text)  # G1, the speculative strategy, in words
    reasons: Mapped[list[str]] = mapped_column(JSON)
    evidence: Mapped[dict[str, Any]] = mapped_column(JSON)
