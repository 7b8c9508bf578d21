"""The operator never imports torch (its image ships without it): neither through its own
modules nor through building the `specd` CLI that hosts the `operator` subcommand."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
{setup}
import specd.operator.handlers, specd.operator.kube, specd.operator.manifests
heavy = sorted(m for m in ("torch", "transformers", "streamlit") if m in sys.modules)
print(",".join(heavy))
"""


def _heavy(setup: str) -> str:
    out = subprocess.run([sys.executable, "-c", CHECK.format(setup=setup)], check=True,
                         capture_output=True, text=True, timeout=120)
    return out.stdout.strip()


def test_operator_modules_do_not_import_torch() -> None:
    assert _heavy("import specd.operator.__main__") == ""


def test_building_the_cli_does_not_import_torch() -> None:
    assert _heavy("import specd.cli; specd.cli.build_parser()") == ""


def test_operator_help() -> None:
    out = subprocess.run([sys.executable, "-m", "specd.operator", "--help"], check=True,
                         capture_output=True, text=True, timeout=60)
    assert "--kubeconfig" in out.stdout and "--metrics-port" in out.stdout


def test_missing_kubeconfig_is_a_clear_error() -> None:
    out = subprocess.run([sys.executable, "-m", "specd.operator", "--kubeconfig",
                          "/nonexistent/kubeconfig"], capture_output=True, text=True, timeout=60)
    assert out.returncode == 2
    assert out.stderr.strip() == \
        "specd operator: error: kubeconfig not found: /nonexistent/kubeconfig"
