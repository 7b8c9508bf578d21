"""What the per-service pages share: the title with the API's banner, the service chooser
(kept in the URL as ``?ns=&name=``), and a table from the history store or its banner."""

from __future__ import annotations

from collections.abc import Sequence
from typing import Any

import streamlit as st


def header(title: str, kube_error: str | None) -> None:
    st.title(title)
    if kube_error:
        st.error(f"Kubernetes: {kube_error}")


def choose(objects: Sequence[dict[str, Any]]) -> tuple[str, str] | None:
    params = st.query_params
    names = sorted(f"{o['metadata']['namespace']}/{o['metadata']['name']}" for o in objects)
    if not names:
        st.info("No SpeculativeService to show.")
        return None
    wanted = f"{params.get('ns', '')}/{params.get('name', '')}"
    picked = st.selectbox("service", names,
                          index=names.index(wanted) if wanted in names else 0, key="service")
    namespace, name = picked.split("/", 1)
    params["ns"], params["name"] = namespace, name
    return namespace, name


def chosen_object(objects: Sequence[dict[str, Any]]) -> dict[str, Any] | None:
    chosen = choose(objects)
    if chosen is None:
        return None
    return next(o for o in objects
                if (o["metadata"]["namespace"], o["metadata"]["name"]) == chosen)


def rows_or(rows: list[dict[str, Any]], empty: str) -> None:
    """A full-width table of ``rows``, or the ``empty`` note when there are none."""
    if rows:
        st.dataframe(rows, hide_index=True, width="stretch")
    else:
        st.info(empty)


def store_table(rows: list[dict[str, Any]], error: str | None, empty: str) -> None:
    """Rows read from the history store, or the store's banner, or ``empty``."""
    if error:
        st.warning(f"History store: {error}")
        if rows:
            st.dataframe(rows, hide_index=True, width="stretch")
        return
    rows_or(rows, empty)
