"""The dashboard's settings, from the environment the chart sets (``helm/specd/templates/
dashboard.yaml``) or from ``specd dashboard``'s flags, which it turns into the same variables
before Streamlit starts the app (pure)."""

from __future__ import annotations

import os
from collections.abc import Mapping
from dataclasses import dataclass

from specd import SpecdError

DEFAULT_PORT = 8501


@dataclass(frozen=True)
class DashboardConfig:
    namespaces: tuple[str, ...] = ()  # empty: every namespace
    kubeconfig: str | None = None  # None: in-cluster, else ~/.kube/config
    prometheus_url: str | None = None
    history_url: str | None = None
    controls: bool = False  # read-only unless enabled (and then only for authorised users)
    refresh_s: float = 10.0  # live tiles' refresh period (the user may turn it off)
    window: str = "5m"  # the fleet's figures are rates over this window
    allowed_users: tuple[str, ...] = ()  # who may act (OIDC e-mail or token user names)
    tokens: tuple[tuple[str, str], ...] = ()  # (user, token): sign-in without OIDC
    oidc: bool = False  # st.login with the provider the chart configures

    @classmethod
    def from_env(cls, env: Mapping[str, str] | None = None) -> DashboardConfig:
        env = os.environ if env is None else env
        controls = env.get("SPECD_DASHBOARD_CONTROLS", "disabled")
        if controls not in ("enabled", "disabled"):
            raise SpecdError(f"SPECD_DASHBOARD_CONTROLS must be enabled or disabled, "
                             f"not {controls!r}")
        try:
            refresh = float(env.get("SPECD_DASHBOARD_REFRESH_SECONDS", "10"))
        except ValueError as exc:
            raise SpecdError("SPECD_DASHBOARD_REFRESH_SECONDS must be a number of "
                             "seconds") from exc
        if refresh <= 0:
            raise SpecdError("SPECD_DASHBOARD_REFRESH_SECONDS must be > 0")
        url = env.get("SPECD_PROMETHEUS_URL") or None
        if url and not url.startswith(("http://", "https://")):
            raise SpecdError(f"SPECD_PROMETHEUS_URL must be an http(s) URL, not {url!r}")
        tokens = []
        for pair in filter(None, (p.strip() for p in env.get("SPECD_DASHBOARD_TOKENS",
                                                              "").split(","))):
            user, _, token = pair.partition("=")
            if not user or len(token) < 16:
                raise SpecdError("SPECD_DASHBOARD_TOKENS holds user=token pairs, each token "
                                 "at least 16 characters")
            tokens.append((user, token))
        allowed = tuple(u.strip() for u in env.get("SPECD_DASHBOARD_ALLOWED_USERS",
                                                   "").split(",") if u.strip())
        oidc = bool(env.get("SPECD_OIDC_CLIENT_ID"))
        if controls == "enabled" and not allowed:
            raise SpecdError("controls are enabled but SPECD_DASHBOARD_ALLOWED_USERS is empty: "
                             "name who may act")
        if controls == "enabled" and not (tokens or oidc):
            raise SpecdError("controls are enabled but nobody can sign in: configure OIDC "
                             "(SPECD_OIDC_*) or SPECD_DASHBOARD_TOKENS")
        return cls(
            allowed_users=allowed, tokens=tuple(tokens), oidc=oidc,
            namespaces=tuple(n for n in env.get("SPECD_DASHBOARD_NAMESPACES", "").split(",")
                             if n.strip()),
            kubeconfig=env.get("KUBECONFIG") or None, prometheus_url=url,
            history_url=env.get("SPECD_HISTORY_URL") or None,
            controls=controls == "enabled", refresh_s=refresh,
            window=env.get("SPECD_DASHBOARD_WINDOW", "5m"))
