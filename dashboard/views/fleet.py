"""The fleet page: every SpeculativeService at a glance, with a "needs attention" filter;
the filters live in the URL (``?attention=1&ns=team-a&q=chat``), so a view can be shared."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from typing import Any

import streamlit as st

from specd.dashboard.data import fleet as f
from specd.dashboard.data.fleet_queries import Key
from specd.dashboard.data.live import Live

SAMPLE = "kubectl apply -f examples/speculativeservice-plain.yaml"


def _figure(value: float | None, digits: int = 2, scale: float = 1.0, unit: str = "") -> str:
    return "no data" if value is None else f"{value * scale:.{digits}f}{unit}"


SPARKLINE = "tokens/s, 30 min"


def table(rows: Sequence[f.FleetRow], sparklines: Mapping[Key, list[float]] | None = None
          ) -> list[dict[str, Any]]:
    """The rows as the page shows them (strings: "no data" is never a blank or a 0; a
    service without a sparkline has an empty one, not a flat line at 0)."""
    out = []
    for r in rows:
        fig = r.figures
        out.append({
            "namespace": r.namespace, "service": r.name, "phase": r.phase, "ready": r.ready,
            "mode": r.mode, "K": "-" if r.k is None else str(r.k),
            "stable": r.stable or "-", "canary": r.canary or "-", "step": r.step,
            "weight set/actual": ("-" if r.set_weight is None
                                  else f"{r.set_weight}/{r.actual_weight}"),
            "rollout": r.rollout, "tuner": r.tuner,
            "τ": _figure(fig.get("tau")),
            "acceptance": _figure(fig.get("acceptance"), 0, 100, " %"),
            "truncation": _figure(fig.get("truncation"), 0, 100, " %"),
            "tokens/s": _figure(fig.get("tokens_per_s"), 1),
            SPARKLINE: list((sparklines or {}).get(r.key, [])),
            "p95 TPOT": _figure(fig.get("tpot_p95"), 0, 1000, " ms"),
            "needs attention": "; ".join(r.attention) or "-",
        })
    return out


def render(objects: Sequence[dict[str, Any]], live: Live, *, window: str,
           kube_error: str | None = None) -> None:
    st.title("Fleet")
    if kube_error:
        st.error(f"Kubernetes: {kube_error}")
    for line in live.errors:
        st.warning(f"Prometheus: {line}")
    params = st.query_params
    rows = f.fleet(objects, live.figures)
    namespaces = sorted({r.namespace for r in rows})
    left, middle, right = st.columns([1, 1, 2])
    attention_only = left.toggle("needs attention only", value=params.get("attention") == "1",
                                 key="attention")
    chosen = params.get("ns", "")
    namespace = middle.selectbox("namespace", ["(all)", *namespaces],
                                 index=(namespaces.index(chosen) + 1
                                        if chosen in namespaces else 0), key="ns")
    text = right.text_input("name contains", value=params.get("q", ""), key="q")
    # the filters back into the URL, so the view can be shared or reloaded
    wanted = {"attention": "1" if attention_only else None,
              "ns": None if namespace == "(all)" else namespace, "q": text or None}
    for key, value in wanted.items():
        if value is None:
            params.pop(key, None)
        elif params.get(key) != value:
            params[key] = value
    shown = f.select(rows, attention_only=attention_only,
                     namespace=None if namespace == "(all)" else namespace, text=text)
    needing = sum(1 for r in rows if r.attention)
    st.caption(f"{len(rows)} services, {needing} needing attention; figures over the last "
               f"{window} (both tracks); Prometheus queries this refresh: {live.queries}")
    if not rows and not kube_error:
        st.info(f"No SpeculativeService yet. Apply a sample: `{SAMPLE}`")
        return
    if not shown:
        st.info("No service matches these filters.")
        return
    st.dataframe(table(shown, live.sparklines), hide_index=True, width="stretch",
                 column_config={SPARKLINE: st.column_config.LineChartColumn(
                     SPARKLINE, help="tokens/s over the last 30 minutes (rate over 1 m)")})
