"""The history page: a service's past rollouts (outcome, duration, who promoted or aborted),
newest first, from the history store."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from datetime import UTC, datetime
from typing import Any

from specd.dashboard.views.common import choose, header, store_table
from specd.kubectl.render import duration


def rows(records: Sequence[Any], now: datetime) -> list[dict[str, Any]]:
    return [{"started": r.started_at.strftime("%Y-%m-%d %H:%M:%S"),
             "stable -> canary": f"{r.stable} -> {r.canary}",
             "outcome": r.outcome or "in progress",
             "duration": duration(r.duration(now)),
             "decided by": r.decided_by or "-", "events": len(r.events),
             "measurements": r.measurement_count, "message": r.message or ""}
            for r in records]


def render(objects: Sequence[dict[str, Any]], *,
           history: Callable[[str, str], tuple[list[Any], str | None]],
           kube_error: str | None = None) -> None:
    header("History", kube_error)
    chosen = choose(objects)
    if chosen is None:
        return
    found, error = history(*chosen)
    store_table(rows(found, datetime.now(UTC)), error, "No rollout recorded for this service.")
