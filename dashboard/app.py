"""The dashboard's Streamlit entry point (``specd dashboard`` runs it): reads its settings,
caches its clients, and draws the pages.

Read-only: no page has a control yet (controls come with the rollout page, and only for
authorised users when ``SPECD_DASHBOARD_CONTROLS=enabled``).
"""

from __future__ import annotations

import time
from datetime import timedelta
from typing import Any

import streamlit as st

from specd.dashboard.config import DashboardConfig
from specd.dashboard.data import sources
from specd.dashboard.data.live import Live, read_fleet, read_service
from specd.dashboard.pages import fleet, service


@st.cache_resource
def config() -> DashboardConfig:
    return DashboardConfig.from_env()


@st.cache_resource
def kube(kubeconfig: str | None) -> Any:
    return sources.api_client(kubeconfig)


@st.cache_resource
def prometheus(url: str | None) -> Any:
    return sources.prometheus(url)


def fleet_data(cfg: DashboardConfig) -> tuple[list[dict[str, Any]], Live, str | None]:
    error = None
    try:
        objects = sources.list_services(kube(cfg.kubeconfig), cfg.namespaces)
    except sources.SourceError as exc:
        objects, error = [], str(exc)
    return objects, read_fleet(prometheus(cfg.prometheus_url), cfg.window), error


def fleet_page() -> None:
    cfg = config()
    live_updates = st.sidebar.toggle("live refresh", value=True, key="live",
                                     help=f"redraw every {cfg.refresh_s:g} s")

    @st.fragment(run_every=timedelta(seconds=cfg.refresh_s) if live_updates else None)
    def tiles() -> None:
        objects, live, error = fleet_data(cfg)
        fleet.render(objects, live, window=cfg.window, kube_error=error)

    tiles()


def service_page() -> None:
    cfg = config()
    try:
        objects, error = sources.list_services(kube(cfg.kubeconfig), cfg.namespaces), None
    except sources.SourceError as exc:
        objects, error = [], str(exc)
    provider = prometheus(cfg.prometheus_url)
    service.render(objects, lambda ns, name, frame: read_service(provider, ns, name, frame,
                                                                 time.time()),
                   kube_error=error)


def main() -> None:
    st.set_page_config(page_title="specd", layout="wide")
    st.navigation([st.Page(fleet_page, title="Fleet", url_path="fleet", default=True),
                   st.Page(service_page, title="Service", url_path="service")]).run()


main()
