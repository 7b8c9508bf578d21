"""The rollout page: the steps and where the canary is, set vs actual weight, every analysis
result with its threshold, verdict and PromQL, the event timeline from the history store,
the rollback reason in words, and the controls.

Controls are the shared merge patches of ``specd.operator.rollout.controls`` (the ones
``kubectl specd`` sends), enabled by the rollout's state as the Argo Rollouts dashboard
enables them, each confirmed in a dialog, recorded with the user as the actor. A user who may
not act sees no button at all, and why.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from typing import Any

import streamlit as st

from specd.dashboard import auth
from specd.dashboard.config import DashboardConfig
from specd.dashboard.data import rollout as r
from specd.dashboard.views.common import chosen_object, header, rows_or, store_table
from specd.operator.rollout import controls

LABELS = {"promote": "Promote", "promote-full": "Promote full", "pause": "Pause",
          "resume": "Resume", "abort": "Abort", "retry": "Retry"}
WHAT = {"promote": "go on to the next step now",
        "promote-full": "skip the remaining steps and analysis: the canary becomes stable",
        "pause": "hold the rollout at its current step until resumed",
        "resume": "go on from the pause",
        "abort": "roll back: the stable track takes all traffic again",
        "retry": "start the rollout again from its first step"}

# act(namespace, name, action, actor) -> None; raises ControlError with a message for people
Act = Callable[[str, str, str, str], None]


class ControlError(Exception):
    pass


def actor_of(user: auth.User) -> str:
    return f"dashboard:{user.name}"


def perform(act: Act, namespace: str, name: str, action: str, user: auth.User) -> str:
    """Send one control; the line the page shows afterwards."""
    try:
        act(namespace, name, action, actor_of(user))
    except ControlError as exc:
        return f"{LABELS[action]} failed: {exc}"
    return f"{LABELS[action]} sent for {namespace}/{name} as {actor_of(user)}"


def _confirm(act: Act, namespace: str, name: str, action: str, user: auth.User) -> None:
    @st.dialog(f"{LABELS[action]} {namespace}/{name}?")
    def dialog() -> None:
        st.write(f"This will {WHAT[action]}.")
        left, right = st.columns(2)
        if left.button(f"{LABELS[action]}", key="confirm", type="primary"):
            st.session_state["control_result"] = perform(act, namespace, name, action, user)
            st.rerun()
        if right.button("Cancel", key="cancel"):
            st.rerun()

    dialog()


def control_bar(obj: dict[str, Any], cfg: DashboardConfig, user: auth.User | None,
                act: Act) -> None:
    allowed, why = auth.may_act(cfg, user)
    if not allowed or user is None:
        st.caption(why)
        return
    enabled = set(controls.available(obj))
    meta = obj["metadata"]
    columns = st.columns(len(controls.ACTIONS))
    for column, action in zip(columns, controls.ACTIONS, strict=True):
        if column.button(LABELS[action], key=f"act-{action}", disabled=action not in enabled,
                         help=WHAT[action]):
            _confirm(act, meta["namespace"], meta["name"], action, user)


def timeline(records: Sequence[Any]) -> list[dict[str, Any]]:
    """The newest rollout's events as rows (oldest first)."""
    if not records:
        return []
    return [{"at": e.at.strftime("%Y-%m-%d %H:%M:%S"), "step": e.step + 1,
             "weight": e.weight, "event": e.action, "by": e.actor or "operator",
             "reason": e.reason or ""} for e in records[0].events]


def render(objects: Sequence[dict[str, Any]], *, cfg: DashboardConfig,
           user: auth.User | None, act: Act,
           history: Callable[[str, str], tuple[list[Any], str | None]],
           kube_error: str | None = None) -> None:
    header("Rollout", kube_error)
    if st.session_state.get("control_result"):
        line = st.session_state.pop("control_result")
        (st.error if "failed" in line else st.success)(line)
    obj = chosen_object(objects)
    if obj is None:
        return
    s = r.summary(obj)
    a, b, c, d = st.columns(4)
    a.metric("phase", s.phase + (f" ({s.pause_reason})" if s.pause_reason else ""))
    b.metric("step", s.step)
    c.metric("weight set / actual", f"{s.set_weight} / {s.actual_weight}" if s.canary
             else "-")
    d.metric("stable -> canary", f"{s.stable or '-'} -> {s.canary or '-'}")
    if s.rolled_back:
        st.error(f"Rolled back: {s.rolled_back}")
    elif s.message:
        st.caption(s.message)
    control_bar(obj, cfg, user, act)
    st.subheader("steps")
    rows_or([vars(step) for step in r.steps(obj)],
            "This service rolls out with a plain rolling update (no canary steps).")
    st.subheader("analysis")
    rows_or(r.analysis_rows(obj), "No analysis measured in this rollout yet.")
    st.subheader("events")
    records, error = history(obj["metadata"]["namespace"], obj["metadata"]["name"])
    store_table(timeline(records), error, "No rollout recorded for this service.")
