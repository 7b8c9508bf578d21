"""``specd dashboard``: the Streamlit dashboard (``dashboard/app.py``), read-only by default.

Flags become the environment the app reads (the chart sets the same variables), then the
process becomes Streamlit's server (``exec``: signals reach it directly under tini)."""

from __future__ import annotations

import argparse
import os
import sys

from specd import SpecdError

HELP = "the Streamlit dashboard: fleet, rollouts and policy (read-only by default)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"),
                        help="kubeconfig file (default: $KUBECONFIG, else in-cluster, "
                             "else ~/.kube/config)")
    parser.add_argument("--namespace", "-n", action="append", default=[], metavar="NS",
                        help="show only this namespace (repeatable; default: all) "
                             "[env SPECD_DASHBOARD_NAMESPACES, comma-separated]")
    parser.add_argument("--prometheus-url", default=os.environ.get("SPECD_PROMETHEUS_URL"),
                        help="Prometheus the live figures come from [env SPECD_PROMETHEUS_URL]")
    parser.add_argument("--history-url", default=os.environ.get("SPECD_HISTORY_URL"),
                        help="the operator's history store [env SPECD_HISTORY_URL]")
    parser.add_argument("--address", default=os.environ.get("SPECD_DASHBOARD_ADDRESS",
                                                            "0.0.0.0"),
                        help="address to listen on (default 0.0.0.0) "
                             "[env SPECD_DASHBOARD_ADDRESS]")
    parser.add_argument("--port", type=int,
                        default=int(os.environ.get("SPECD_DASHBOARD_PORT", "8501")),
                        help="port (default 8501) [env SPECD_DASHBOARD_PORT]")
    parser.add_argument("--refresh", type=float, default=float(os.environ.get(
        "SPECD_DASHBOARD_REFRESH_SECONDS", "10")), metavar="SECONDS",
                        help="live tiles' refresh period (default 10)")


def streamlit_argv(app: str, args: argparse.Namespace) -> list[str]:
    return [sys.executable, "-m", "streamlit", "run", app,
            "--server.address", args.address, "--server.port", str(args.port),
            "--server.headless", "true", "--server.fileWatcherType", "none",
            "--browser.gatherUsageStats", "false", "--global.developmentMode", "false",
            "--client.toolbarMode", "viewer"]


OIDC_ENV = ("SPECD_OIDC_ISSUER_URL", "SPECD_OIDC_CLIENT_ID", "SPECD_OIDC_CLIENT_SECRET",
            "SPECD_OIDC_COOKIE_SECRET", "SPECD_OIDC_REDIRECT_URI")


def oidc_secrets(env: dict[str, str]) -> str | None:
    """Streamlit's ``[auth]`` section for ``st.login`` from the chart's OIDC variables (None
    without OIDC); a partial configuration is refused naming what is missing."""
    if not env.get("SPECD_OIDC_CLIENT_ID"):
        return None
    missing = [name for name in OIDC_ENV if not env.get(name)]
    if missing:
        raise SpecdError(f"OIDC is configured but {', '.join(missing)} "
                         f"{'is' if len(missing) == 1 else 'are'} not set")

    def quoted(value: str) -> str:
        return '"' + value.replace("\\", "\\\\").replace('"', '\\"') + '"'

    issuer = env["SPECD_OIDC_ISSUER_URL"].rstrip("/")
    return "\n".join([
        "[auth]",
        f"redirect_uri = {quoted(env['SPECD_OIDC_REDIRECT_URI'])}",
        f"cookie_secret = {quoted(env['SPECD_OIDC_COOKIE_SECRET'])}",
        f"client_id = {quoted(env['SPECD_OIDC_CLIENT_ID'])}",
        f"client_secret = {quoted(env['SPECD_OIDC_CLIENT_SECRET'])}",
        f"server_metadata_url = {quoted(issuer + '/.well-known/openid-configuration')}",
        ""])


def write_secrets(text: str, home: str) -> str:
    """Streamlit reads ``$HOME/.streamlit/secrets.toml``; written owner-only (the pod's HOME
    is its /tmp emptyDir)."""
    folder = os.path.join(home, ".streamlit")
    os.makedirs(folder, mode=0o700, exist_ok=True)
    path = os.path.join(folder, "secrets.toml")
    fd = os.open(path, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600)
    with os.fdopen(fd, "w") as f:
        f.write(text)
    return path


def run(args: argparse.Namespace) -> int:
    if not 0 < args.port < 65536 or args.refresh <= 0:
        raise SpecdError("--port must be 1-65535 and --refresh > 0")
    if args.kubeconfig and not os.path.isfile(args.kubeconfig):
        raise SpecdError(f"kubeconfig not found: {args.kubeconfig}")
    env = dict(os.environ)
    for name, value in (("KUBECONFIG", args.kubeconfig),
                        ("SPECD_PROMETHEUS_URL", args.prometheus_url),
                        ("SPECD_HISTORY_URL", args.history_url),
                        ("SPECD_DASHBOARD_NAMESPACES", ",".join(args.namespace) or None),
                        ("SPECD_DASHBOARD_REFRESH_SECONDS", str(args.refresh))):
        if value:
            env[name] = value
    from specd.dashboard.config import DashboardConfig

    DashboardConfig.from_env(env)  # refuse bad settings here, in one line, not in the page
    secrets = oidc_secrets(env)
    if secrets is not None:
        write_secrets(secrets, env.get("HOME") or os.path.expanduser("~"))
    import specd.dashboard

    app = os.path.join(os.path.dirname(specd.dashboard.__file__), "app.py")
    os.execve(sys.executable, streamlit_argv(app, args), env)
    return 0  # not reached
