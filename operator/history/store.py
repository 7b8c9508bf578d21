"""Migrations and the store's reads and writes (a thin edge over SQLAlchemy).

Writes are idempotent by each table's natural key: writing the same event, measurement or
policy change twice (a handler re-run after a restart) leaves one row and returns False the
second time. The store never decides anything; callers keep it off the rollout's critical
path (a failed write is logged and counted, never a reason to stop a rollout).
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from datetime import datetime
from importlib import resources
from typing import Any

from alembic import command
from alembic.config import Config
from alembic.runtime.migration import MigrationContext
from sqlalchemy import create_engine, select
from sqlalchemy.engine import make_url
from sqlalchemy.exc import IntegrityError
from sqlalchemy.orm import Session, sessionmaker

from specd.operator.history import queries
from specd.operator.history.models import (
    Measurement,
    PilotVerdict,
    PolicyChange,
    Rollout,
    RolloutEvent,
)


def masked_url(url: str) -> str:
    """``url`` as it may be printed: its password, if any, as ``***`` (raises
    ``sqlalchemy.exc.ArgumentError`` for what is not a database URL)."""
    return make_url(url).render_as_string(hide_password=True)


def alembic_config(url: str) -> Config:
    config = Config()
    config.set_main_option("script_location",
                           str(resources.files("specd.operator.history") / "migrations"))
    config.set_main_option("sqlalchemy.url", url.replace("%", "%%"))
    return config


def upgrade(url: str, revision: str = "head") -> None:
    command.upgrade(alembic_config(url), revision)


def downgrade(url: str, revision: str = "base") -> None:
    command.downgrade(alembic_config(url), revision)


def current(url: str) -> str | None:
    """The schema revision the database is at (None: never migrated)."""
    engine = create_engine(url)
    try:
        with engine.connect() as conn:
            return MigrationContext.configure(conn).get_current_revision()
    finally:
        engine.dispose()


class HistoryStore:
    def __init__(self, url: str) -> None:
        self.url = url
        # a dead PostgreSQL must fail fast, not after the OS's TCP timeout
        connect_args = {"connect_timeout": 3} if url.startswith("postgresql") else {}
        self.engine = create_engine(url, pool_pre_ping=True, connect_args=connect_args)
        self.sessions = sessionmaker(self.engine, expire_on_commit=False)

    def close(self) -> None:
        self.engine.dispose()

    @contextmanager
    def _session(self) -> Iterator[Session]:
        with self.sessions() as session, session.begin():
            yield session

    def _insert(self, row: Any) -> bool:
        try:
            with self._session() as session:
                session.add(row)
            return True
        except IntegrityError:  # the natural key exists: written before
            return False

    # ---- writes ----------------------------------------------------------------------------

    def rollout(self, *, namespace: str, service: str, uid: str, stable: str, canary: str,
                started_at: datetime) -> int:
        """The id of this rollout, created on first sight."""
        key = (Rollout.service_uid == uid, Rollout.canary_version == canary,
               Rollout.started_at == started_at)
        with self._session() as session:
            found = session.scalar(select(Rollout.id).where(*key))
        if found is not None:
            return int(found)
        self._insert(Rollout(namespace=namespace, service=service, service_uid=uid,
                             stable_version=stable, canary_version=canary,
                             started_at=started_at))
        with self._session() as session:
            return int(session.scalar(select(Rollout.id).where(*key)))

    def event(self, rollout_id: int, *, at: datetime, step: int, weight: int, action: str,
              actor: str | None = None, reason: str | None = None) -> bool:
        return self._insert(RolloutEvent(rollout_id=rollout_id, at=at, step=step, weight=weight,
                                         action=action, actor=actor, reason=reason))

    def measurement(self, rollout_id: int, *, at: datetime, step: int, name: str, metric: str,
                    task_group: str | None, window: str, verdict: str,
                    canary: float | None = None, stable: float | None = None,
                    value: float | None = None, query: str | None = None,
                    message: str | None = None) -> bool:
        return self._insert(Measurement(
            rollout_id=rollout_id, at=at, step=step, name=name, metric=metric,
            task_group=task_group or "", window=window, verdict=verdict, canary=canary,
            stable=stable, value=value, query=query, message=message))

    def finish(self, rollout_id: int, *, at: datetime | None, outcome: str | None,
               message: str = "", if_open: bool = False) -> None:
        """Set how the rollout ended (the latest word wins: a retry reopens it with None;
        ``if_open``: only if it has not ended, so a rolled-back rollout stays RolledBack)."""
        with self._session() as session:
            row = session.get(Rollout, rollout_id)
            if row is not None and not (if_open and row.outcome is not None):
                row.ended_at, row.outcome, row.message = at, outcome, message or None

    def policy_change(self, *, namespace: str, service: str, uid: str, task_group: str,
                      at: datetime, reason: str, before: dict[str, Any],
                      after: dict[str, Any], evidence: dict[str, Any],
                      applied: bool = True) -> bool:
        return self._insert(PolicyChange(
            namespace=namespace, service=service, service_uid=uid, task_group=task_group,
            at=at, reason=reason, before=before, after=after, evidence=evidence,
            applied=int(applied)))

    def pilot_verdict(self, *, pilot: str, started_at: datetime, task_group: str,
                      decision: str, crossover_rps: float | None, regression_ok: bool,
                      candidate: str, reasons: list[str], evidence: dict[str, Any]) -> bool:
        return self._insert(PilotVerdict(
            pilot=pilot, started_at=started_at, task_group=task_group, decision=decision,
            crossover_rps=crossover_rps, regression_ok=int(regression_ok), candidate=candidate,
            reasons=reasons, evidence=evidence))

    # ---- reads -----------------------------------------------------------------------------

    def rollouts(self, namespace: str, service: str, *, measurements: bool = False,
                 limit: int | None = None) -> list[queries.RolloutRecord]:
        """Past and current rollouts, newest first, as dataclasses (``queries``)."""
        with self._session() as session:
            return queries.rollout_history(session, namespace, service,
                                           measurements=measurements, limit=limit)

    def policy_changes(self, namespace: str, service: str, *,
                       limit: int | None = None) -> list[queries.PolicyChangeRecord]:
        """The tuner's changes, newest first, with their evidence (``queries``)."""
        with self._session() as session:
            return queries.policy_changes(session, namespace, service, limit=limit)

    def pilot_verdicts(self, *, pilot: str | None = None,
                       limit: int | None = None) -> list[queries.PilotVerdictRecord]:
        """``specd pilot`` verdicts, newest run first (``queries``)."""
        with self._session() as session:
            return queries.pilot_verdicts(session, pilot=pilot, limit=limit)

    def rollout_count(self, namespace: str, service: str) -> int:
        with self._session() as session:
            return queries.rollout_count(session, namespace, service)

    def history(self, namespace: str, service: str) -> list[dict[str, Any]]:
        """Past and current rollouts of one service, newest first, with their events."""
        with self._session() as session:
            rollouts = session.scalars(
                select(Rollout).where(Rollout.namespace == namespace,
                                      Rollout.service == service)
                .order_by(Rollout.started_at.desc())).all()
            return [{
                "id": r.id, "stable": r.stable_version, "canary": r.canary_version,
                "started_at": r.started_at, "ended_at": r.ended_at, "outcome": r.outcome,
                "message": r.message,
                "events": [{"at": e.at, "step": e.step, "weight": e.weight, "action": e.action,
                            "actor": e.actor, "reason": e.reason} for e in r.events],
                "measurements": len(r.measurements),
            } for r in rollouts]
