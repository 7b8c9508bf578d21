"""The service page: what speculative decoding is doing for one service, stable and canary
side by side, over 5 minutes, an hour or six (``?ns=NS&name=NAME&w=1h`` in the URL)."""

from __future__ import annotations

from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

import streamlit as st

from specd.dashboard.data import service_queries as sq
from specd.dashboard.data.live import ServiceLive
from specd.dashboard.views.common import choose, header

TITLES = {"acceptance": "acceptance rate (accepted / verified)",
          "tau": "τ, tokens committed per request per round",
          "truncation": "truncation ratio (truncated / drafted)",
          "tokens_per_s": "tokens/s emitted",
          "ttft_p95": "p95 time to first token (s), by task group",
          "tpot_p95": "p95 time per output token (s), by task group"}


def chart_rows(series: sq.Series) -> list[dict[str, Any]]:
    """Long-form rows (time, column, value) for one chart; a column per track (and group)."""
    return [{"time": datetime.fromtimestamp(t, UTC), "series": " / ".join(k), "value": v}
            for k, points in sorted(series.items()) for t, v in points]


def render(objects: Sequence[dict[str, Any]], read: Any, *, kube_error: str | None = None
           ) -> None:
    """``read(namespace, name, frame)`` -> ``ServiceLive`` (the app binds the provider)."""
    import pandas as pd

    header("Service", kube_error)
    chosen = choose(objects)
    if chosen is None:
        return
    params = st.query_params
    window = st.radio("window", list(sq.WINDOWS), horizontal=True, key="w",
                      index=list(sq.WINDOWS).index(params.get("w", "5m"))
                      if params.get("w", "5m") in sq.WINDOWS else 0)
    params["w"] = window
    live: ServiceLive = read(*chosen, sq.Frame.of(window))
    for line in live.errors:
        st.warning(f"Prometheus: {line}")
    st.caption(f"Prometheus queries this refresh: {live.queries}")
    left, right = st.columns(2)
    for i, figure in enumerate(sq.SERIES):
        column = left if i % 2 == 0 else right
        column.subheader(TITLES[figure])
        rows = chart_rows(live.series.get(figure, {}))
        if rows:
            frame = pd.DataFrame(rows).pivot_table(index="time", columns="series",
                                                   values="value")
            column.line_chart(frame)
        else:
            column.info("no data in this window")
    left, middle, right = st.columns(3)
    left.subheader("acceptance by draft position")
    if live.position_acceptance:
        frame = pd.DataFrame([{"position": int(p), "track": t, "acceptance": v}
                              for (t, p), v in live.position_acceptance.items() if p.isdigit()])
        left.bar_chart(frame.pivot_table(index="position", columns="track",
                                         values="acceptance"))
    else:
        left.info("no data in this window")
    middle.subheader("verify length (request-rounds)")
    if live.verify_length:
        middle.bar_chart(pd.DataFrame(live.verify_length))
    else:
        middle.info("no data in this window")
    right.subheader("round time by phase")
    if live.phase_shares:
        right.dataframe(pd.DataFrame(live.phase_shares).map(lambda s: f"{100 * s:.0f} %"))
    else:
        right.info("no data in this window")
