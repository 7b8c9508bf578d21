"""The dashboard app itself (Streamlit's AppTest runs dashboard/app.py as a browser would
ask for it): with the Kubernetes API and Prometheus out of reach, the page still draws, says
what is missing in banners and shows no fake figures; bad settings are refused by
``specd dashboard`` in one line."""

from __future__ import annotations

import socket
from pathlib import Path

import pytest
from streamlit.testing.v1 import AppTest

from specd.cli import main as specd_main

APP = Path(__file__).resolve().parents[1] / "dashboard" / "app.py"


def closed_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]  # closed again on return: connections are refused


def kubeconfig_to(tmp_path: Path, port: int) -> Path:
    path = tmp_path / "kubeconfig"
    path.write_text(f"""apiVersion: v1
kind: Config
clusters: [{{name: c, cluster: {{server: "http://127.0.0.1:{port}"}}}}]
users: [{{name: u, user: {{token: t}}}}]
contexts: [{{name: x, context: {{cluster: c, user: u}}}}]
current-context: x
""")
    return path


def test_nothing_reachable_still_draws_with_banners(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_to(tmp_path, closed_port())))
    monkeypatch.delenv("SPECD_PROMETHEUS_URL", raising=False)
    at = AppTest.from_file(str(APP), default_timeout=60).run()
    assert not at.exception, at.exception
    assert at.title[0].value == "Fleet"
    assert any("Kubernetes: the Kubernetes API is unreachable" in e.value for e in at.error)
    assert any("no Prometheus configured" in w.value for w in at.warning)
    assert not at.dataframe and not at.button  # no rows, and never a control


def test_filters_come_from_the_url(tmp_path, monkeypatch) -> None:
    monkeypatch.setenv("KUBECONFIG", str(kubeconfig_to(tmp_path, closed_port())))
    at = AppTest.from_file(str(APP), default_timeout=60)
    at.query_params["attention"] = "1"
    at.query_params["q"] = "chat"
    at.run()
    assert at.toggle(key="attention").value is True
    assert at.text_input(key="q").value == "chat"


@pytest.mark.parametrize("env, says", [
    ({"SPECD_DASHBOARD_CONTROLS": "yes"}, "SPECD_DASHBOARD_CONTROLS must be enabled or disabled"),
    ({"SPECD_PROMETHEUS_URL": "prometheus:9090"}, "must be an http(s) URL"),
])
def test_bad_settings_are_refused_in_one_line(monkeypatch, capsys, env, says) -> None:
    for name, value in env.items():
        monkeypatch.setenv(name, value)
    assert specd_main(["dashboard", "--port", "8599"]) == 2
    assert says in capsys.readouterr().err


SERVICE_PAGE = '''
from specd.dashboard.data.live import ServiceLive
from specd.dashboard.views import service

objects = [{"metadata": {"namespace": "team-a", "name": name}} for name in ("chat", "code")]


def read(namespace, name, frame):
    live = ServiceLive(queries=9)
    if name == "chat":
        live.series["tau"] = {("stable",): [(1.0e9, 2.0), (1.0e9 + 60, 2.5)],
                              ("canary",): [(1.0e9, 1.5)]}
        live.position_acceptance = {("stable", "1"): 0.8, ("stable", "2"): 0.5}
        live.verify_length = {"stable": {"1": 3.0, "2": 7.0}}
        live.phase_shares = {"stable": {"draft": 0.1, "verify": 0.9}}
    else:
        live.errors.append("tau: Prometheus refused the query: bad_data")
    return live


service.render(objects, read)
'''


def test_the_service_page_draws_what_it_has_and_says_no_data_for_the_rest() -> None:
    at = AppTest.from_string(SERVICE_PAGE, default_timeout=60)
    at.query_params["ns"], at.query_params["name"] = "team-a", "chat"
    at.run()
    assert not at.exception, at.exception
    assert at.selectbox(key="service").value == "team-a/chat"
    infos = [i.value for i in at.info]
    # tau, the positions, verify length and phases have data; five series do not
    assert infos.count("no data in this window") == 5, infos
    assert at.dataframe  # the phase shares
    at.selectbox(key="service").select("team-a/code").run()
    assert any("bad_data" in w.value for w in at.warning)
    assert [i.value for i in at.info].count("no data in this window") == 9


def test_oidc_settings_become_streamlits_auth_section(tmp_path) -> None:
    import os
    import stat
    import tomllib

    from specd import SpecdError
    from specd.commands.dashboard import oidc_secrets, write_secrets

    env = {"SPECD_OIDC_ISSUER_URL": "https://login.example.com/",
           "SPECD_OIDC_CLIENT_ID": "specd", "SPECD_OIDC_CLIENT_SECRET": 'se"cr\\et',
           "SPECD_OIDC_COOKIE_SECRET": "cookie", "SPECD_OIDC_REDIRECT_URI":
           "https://specd.example.com/oauth2callback"}
    path = write_secrets(oidc_secrets(env), str(tmp_path))
    auth = tomllib.loads(Path(path).read_text())["auth"]
    assert auth["client_secret"] == 'se"cr\\et'
    assert auth["server_metadata_url"] == \
        "https://login.example.com/.well-known/openid-configuration"
    assert stat.S_IMODE(os.stat(path).st_mode) == 0o600
    assert oidc_secrets({}) is None
    with pytest.raises(SpecdError, match="SPECD_OIDC_REDIRECT_URI is not set"):
        oidc_secrets({k: v for k, v in env.items() if k != "SPECD_OIDC_REDIRECT_URI"})
