"""The dashboard's Streamlit entry point (``specd dashboard`` runs it): reads its settings,
caches its clients, and draws the pages.

Read-only by default: the rollout page shows controls only with
``SPECD_DASHBOARD_CONTROLS=enabled``, and then only to a signed-in user on the allow list.
"""

from __future__ import annotations

import time
from collections.abc import Callable
from datetime import timedelta
from typing import Any

import streamlit as st

from specd.dashboard import auth
from specd.dashboard.config import DashboardConfig
from specd.dashboard.data import sources
from specd.dashboard.data.live import Live, read_fleet, read_service
from specd.dashboard.views import fleet, history, pilot, policy, rollout, service


def config() -> DashboardConfig:
    # read on every run (it is cheap): a cached copy would outlive a changed environment
    return DashboardConfig.from_env()


@st.cache_resource
def kube(kubeconfig: str | None) -> Any:
    return sources.api_client(kubeconfig)


@st.cache_resource
def prometheus(url: str | None) -> Any:
    return sources.prometheus(url)


def fleet_data(cfg: DashboardConfig) -> tuple[list[dict[str, Any]], Live, str | None]:
    objects, error = services(cfg)
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
    objects, error = services(cfg)
    provider = prometheus(cfg.prometheus_url)
    service.render(objects, lambda ns, name, frame: read_service(provider, ns, name, frame,
                                                                 time.time()),
                   kube_error=error)


def signed_in(cfg: DashboardConfig) -> auth.User | None:
    """The user acting, when controls are on: OIDC (``st.login``) or a configured token."""
    if not cfg.controls:
        return None
    if cfg.oidc:
        if getattr(st.user, "is_logged_in", False):
            st.sidebar.caption(f"signed in as {st.user.get('email')}")
            if st.sidebar.button("Sign out", key="logout"):
                st.logout()
            return auth.User(str(st.user.get("email")), "oidc")
        if st.sidebar.button("Sign in", key="login"):
            st.login()
    if cfg.tokens:
        presented = st.sidebar.text_input("access token", type="password", key="token")
        user = auth.token_user(cfg, presented)
        if presented and user is None:
            st.sidebar.error("unknown token")
        return user
    return None


def send_control(cfg: DashboardConfig) -> rollout.Act:
    def act(namespace: str, name: str, action: str, actor: str) -> None:
        from kubernetes import client
        from kubernetes.client.exceptions import ApiException

        from specd.operator.rollout import controls

        try:
            controls.apply(client.CustomObjectsApi(kube(cfg.kubeconfig)), namespace, name,
                           action, actor, field_manager="specd-dashboard")  # type: ignore[arg-type]
        except ApiException as exc:
            if exc.status == 403:
                raise rollout.ControlError("permission denied (the dashboard's RBAC has no "
                                           "patch on speculativeservices)") from exc
            raise rollout.ControlError(f"the API answered {exc.status}: {exc.reason}") from exc
    return act


def read_store(cfg: DashboardConfig, query: Callable[[Any, str], list[Any]]
               ) -> tuple[list[Any], str | None]:
    """``query(history_read, url)`` on the history store; a missing or unreadable store is
    the page's banner line instead."""
    if not cfg.history_url:
        return [], "no history store configured (--history-url)"
    from specd.operator.history import read as history_read

    try:
        return query(history_read, cfg.history_url), None
    except (history_read.NotAURL, history_read.Unreadable) as exc:
        return [], str(exc)


def from_store(cfg: DashboardConfig, what: str
               ) -> Callable[[str, str], tuple[list[Any], str | None]]:
    """A reader of one service's rows in the history store (``what``: rollouts or
    policy_changes)."""
    def read(namespace: str, name: str) -> tuple[list[Any], str | None]:
        if what == "rollouts":
            return read_store(cfg, lambda r, url: r.rollouts(url, namespace, name,
                                                            limit=50)[0])
        return read_store(cfg, lambda r, url: r.policy_changes(url, namespace, name,
                                                                limit=100))
    return read


def pilot_verdicts(cfg: DashboardConfig) -> Callable[[], tuple[list[Any], str | None]]:
    """A reader of the pilot verdicts in the history store."""
    return lambda: read_store(cfg, lambda r, url: r.pilot_verdicts(url, limit=200))


def services(cfg: DashboardConfig) -> tuple[list[dict[str, Any]], str | None]:
    try:
        return sources.list_services(kube(cfg.kubeconfig), cfg.namespaces), None
    except sources.SourceError as exc:
        return [], str(exc)


def rollout_page() -> None:
    cfg = config()
    user = signed_in(cfg)
    objects, error = services(cfg)
    rollout.render(objects, cfg=cfg, user=user, act=send_control(cfg),
                   history=from_store(cfg, "rollouts"), kube_error=error)


def policy_page() -> None:
    cfg = config()
    objects, error = services(cfg)
    policy.render(objects, changes=from_store(cfg, "policy_changes"), kube_error=error)


def history_page() -> None:
    cfg = config()
    objects, error = services(cfg)
    history.render(objects, history=from_store(cfg, "rollouts"), kube_error=error)


def pilot_page() -> None:
    pilot.render(pilot_verdicts(config()))


def main() -> None:
    st.set_page_config(page_title="specd", layout="wide")
    st.navigation([st.Page(fleet_page, title="Fleet", url_path="fleet", default=True),
                   st.Page(service_page, title="Service", url_path="service"),
                   st.Page(rollout_page, title="Rollout", url_path="rollout"),
                   st.Page(policy_page, title="Policy", url_path="policy"),
                   st.Page(history_page, title="History", url_path="history"),
                   st.Page(pilot_page, title="Pilot", url_path="pilot")]).run()


if __name__ == "__main__":  # how Streamlit runs the script; importing it draws nothing
    main()
