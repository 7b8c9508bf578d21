"""Reading the history store for people (``kubectl specd history``, the dashboard): the URL
checked, reading never creating a database, and every failure one line with the password
masked."""

from __future__ import annotations

import os
from collections.abc import Callable
from typing import Any

from specd.operator.history.queries import (
    PilotVerdictRecord,
    PolicyChangeRecord,
    RolloutRecord,
)


class NotAURL(ValueError):
    """The history URL is not a database URL."""


class Unreadable(Exception):
    """The store could not be read (the message names it, its password masked)."""


def rollouts(url: str, namespace: str, name: str, *, measurements: bool = False,
             limit: int | None = None) -> tuple[list[RolloutRecord], int]:
    """The service's rollouts, newest first (at most ``limit``), and how many there are."""
    def query(history: Any) -> tuple[list[RolloutRecord], int]:
        found = history.rollouts(namespace, name, measurements=measurements, limit=limit)
        total = history.rollout_count(namespace, name) if limit and len(found) >= limit \
            else len(found)
        return found, total
    return _read(url, query)


def policy_changes(url: str, namespace: str, name: str, *,
                   limit: int | None = None) -> list[PolicyChangeRecord]:
    """The tuner's changes to the service, newest first (at most ``limit``)."""
    return _read(url, lambda history: history.policy_changes(namespace, name, limit=limit))


def pilot_verdicts(url: str, *, pilot: str | None = None,
                   limit: int | None = None) -> list[PilotVerdictRecord]:
    """``specd pilot`` verdicts per task group, newest run first (at most ``limit``)."""
    return _read(url, lambda history: history.pilot_verdicts(pilot=pilot, limit=limit))


def _read(url: str, query: Callable[[Any], Any]) -> Any:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import ArgumentError, SQLAlchemyError

    from specd.operator.history import store

    try:
        shown = store.masked_url(url)
    except ArgumentError as exc:
        raise NotAURL(f"not a database URL: {exc}") from exc
    parsed = make_url(url)
    password = parsed.password

    def fail(why: str) -> Unreadable:
        why = why.replace(str(password), "***") if password else why
        return Unreadable(f"history store {shown} cannot be read: {why}")

    database = parsed.database or ""
    if parsed.get_backend_name() == "sqlite" and database not in ("", ":memory:") and \
            not parsed.query.get("uri") and not os.path.isfile(database):
        raise fail("no such file (reading never creates one)")
    try:
        history = store.HistoryStore(url)
    except (SQLAlchemyError, ImportError) as exc:  # e.g. an unknown dialect or no driver
        raise fail(str(exc).splitlines()[0]) from exc
    try:
        return query(history)
    except SQLAlchemyError as exc:
        why = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        if "no such table" in why or ("relation" in why and "does not exist" in why):
            why += f" (not migrated: specd db upgrade {shown})"
        raise fail(why) from exc
    finally:
        history.close()
