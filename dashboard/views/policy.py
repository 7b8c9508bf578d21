"""The policy page: what each task group runs on each track, the tuner's state per group,
and its decisions with their evidence (from the history store)."""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import streamlit as st

from specd.dashboard.data import policy as p
from specd.dashboard.views.common import chosen_object, header, rows_or, store_table


def render(objects: Sequence[dict[str, Any]], *,
           changes: Callable[[str, str], tuple[list[Any], str | None]],
           kube_error: str | None = None) -> None:
    header("Policy", kube_error)
    obj = chosen_object(objects)
    if obj is None:
        return
    tracks = p.effective(obj)
    if not tracks:
        st.info("The operator has not rendered a policy for this service yet.")
    for track, rows in tracks.items():
        st.subheader(f"{track} track")
        st.dataframe(rows, hide_index=True, width="stretch")
    tuning = (obj.get("spec") or {}).get("tuning") or {}
    st.subheader("tuner")
    if not tuning.get("enabled"):
        st.caption("tuning is off (spec.tuning.enabled)")
    else:
        last = ((obj.get("status") or {}).get("tuning") or {}).get("lastRun") or "never"
        st.caption(f"every {tuning.get('interval', '5m')}"
                   f"{', dry run' if tuning.get('dryRun') else ''}; last interval {last}")
        rows_or(p.tuner_rows(obj), "No task group judged yet.")
    st.subheader("decisions")
    found, error = changes(obj["metadata"]["namespace"], obj["metadata"]["name"])
    store_table(p.change_rows(found), error, "No policy change recorded for this service.")
