"""A pilot run's verdicts into the history store (``specd pilot record DIR --history-url``).

``verdict_rows`` is pure: a run folder's ``report.json`` and ``run.json`` become one row per
task group (and one for every group together, ``all``), keyed by the pilot's name and the
run's start, so recording the same run twice writes nothing the second time. The rows carry
what the report concluded and why: the decision, the crossover load, whether the business
regression passed, the candidate strategy in words, the rule's reasons and the per-trace
evidence (paired goodput and latency differences with their intervals, the p99 ratio).
"""

from __future__ import annotations

import json
from datetime import UTC, datetime
from pathlib import Path
from typing import Any


class NotARun(ValueError):
    """The folder holds no reported pilot run."""


def read_run(folder: str | Path) -> tuple[dict[str, Any], dict[str, Any]]:
    """(report.json, run.json) of a reported run folder; NotARun naming what is missing."""
    folder = Path(folder)
    found = []
    for name in ("report.json", "run.json"):
        path = folder / name
        if not path.is_file():
            raise NotARun(f"{folder}: no {name} (run `specd pilot run` or `specd pilot "
                          f"report {folder}` first)")
        found.append(json.loads(path.read_text(encoding="utf-8")))
    return found[0], found[1]


def verdict_rows(report: dict[str, Any], run: dict[str, Any]) -> list[dict[str, Any]]:
    """The store's rows for one run: keyword arguments of ``HistoryStore.pilot_verdict``."""
    pilot = report.get("pilot") or {}
    name = pilot.get("name")
    if not name or "started" not in run:
        raise NotARun("the report names no pilot, or the run has no start time")
    started = datetime.fromtimestamp(float(run["started"]), UTC)
    candidate = ((pilot.get("groups") or {}).get("G1") or {}).get("description") or "G1"
    regression_ok = bool((report.get("regression") or {}).get("ok"))
    capacity = (report.get("cost") or {}).get("capacity_rps") or {}
    rows = []
    for group, found in sorted((report.get("verdicts") or {}).items()):
        if group.startswith("_") or not isinstance(found, dict):
            continue
        rows.append({
            "pilot": name, "started_at": started, "task_group": group,
            "decision": found["decision"], "crossover_rps": found.get("crossover_rps"),
            "regression_ok": regression_ok, "candidate": candidate,
            "reasons": list(found.get("reasons") or []),
            "evidence": {"traces": found.get("traces") or {},
                         "crossover_load": found.get("crossover_load"),
                         "capacity_rps": capacity}})
    return rows


def record(folder: str | Path, url: str) -> tuple[int, int]:
    """Write a run folder's verdicts to the store at ``url`` (migrated to head first):
    (rows written now, rows of the run)."""
    from specd.operator.history import store

    rows = verdict_rows(*read_run(folder))
    store.upgrade(url)
    history = store.HistoryStore(url)
    try:
        written = sum(history.pilot_verdict(**row) for row in rows)
    finally:
        history.close()
    return written, len(rows)
