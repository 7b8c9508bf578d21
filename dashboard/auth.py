"""Who may press a control (pure). Read-only by default: with controls off nobody gets a
button. With controls on, only a user signed in (OIDC through ``st.login``, or presenting one
of the configured tokens) and on the allow list may act; everyone else sees the page
without buttons, and why."""

from __future__ import annotations

import hmac
from dataclasses import dataclass

from specd.dashboard.config import DashboardConfig


@dataclass(frozen=True)
class User:
    name: str
    via: str  # "oidc" | "token"


def token_user(cfg: DashboardConfig, presented: str) -> User | None:
    """The user whose configured token was presented (compared in constant time)."""
    for user, token in cfg.tokens:
        if presented and hmac.compare_digest(presented.encode(), token.encode()):
            return User(user, "token")
    return None


def may_act(cfg: DashboardConfig, user: User | None) -> tuple[bool, str]:
    """(allowed, why not)."""
    if not cfg.controls:
        return False, "read-only: controls are off"
    if user is None:
        return False, "sign in to use the controls"
    if user.name not in cfg.allowed_users:
        return False, f"{user.name} is not allowed to act (SPECD_DASHBOARD_ALLOWED_USERS)"
    return True, ""
