"""The pilot page: what `specd pilot` concluded per task group (adopt within a load range,
low-load only, reject), newest run first, from the history store (`specd pilot record`)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import streamlit as st

from specd.dashboard.views.common import store_table


def rows(records: Sequence[Any]) -> list[dict[str, Any]]:
    return [{"pilot": r.pilot, "started": r.started_at.strftime("%Y-%m-%d %H:%M"),
             "task group": r.task_group, "decision": r.decision,
             "crossover (req/s)": "-" if r.crossover_rps is None else f"{r.crossover_rps:.3g}",
             "regression": "passed" if r.regression_ok else "FAILED",
             "candidate": r.candidate, "why": "; ".join(r.reasons)}
            for r in records]


def render(verdicts: Callable[[], tuple[list[Any], str | None]]) -> None:
    st.title("Pilot")
    st.caption("`specd pilot` runs recorded with `--history-url` (or `specd pilot record`): "
               "the speculative strategy against the better of the plain service and its "
               "equal-resource alternative, per task group.")
    found, error = verdicts()
    store_table(rows(found), error, "No pilot run recorded.")
