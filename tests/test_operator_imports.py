"""The operator and the dashboard never import torch nor the worker package (their images ship
without them): neither through their own modules nor through the `specd` CLI that hosts their
subcommands. The static half (every import, also inside functions) is
tests/test_install_extras.py; this is what a process really loads."""

from __future__ import annotations

import subprocess
import sys

CHECK = """
import sys
{setup}
import specd.operator.handlers, specd.operator.kube, specd.operator.manifests
heavy = sorted(m for m in sys.modules if m in ("torch", "transformers", "streamlit")
               or m.startswith("specd.worker"))
print(",".join(heavy))
"""


def _heavy(setup: str) -> str:
    out = subprocess.run([sys.executable, "-c", CHECK.format(setup=setup)], check=True,
                         capture_output=True, text=True, timeout=120)
    return out.stdout.strip()


def test_operator_modules_do_not_import_torch() -> None:
    assert _heavy("import specd.operator.__main__") == ""


def test_building_the_cli_does_not_import_torch() -> None:
    # every command's arguments: the worker's light modules (drafter names), never torch
    loaded = _heavy("import specd.cli; specd.cli.build_parser()").split(",")
    assert not {"torch", "transformers", "numpy"} & set(loaded), loaded


def test_the_operator_command_and_help_load_no_worker() -> None:
    # what `specd operator ...` and `specd --help` build: only the command they run
    assert _heavy("import specd.cli; specd.cli.build_parser(['operator'])") == ""
    assert _heavy("import specd.cli; specd.cli.build_parser([])") == ""


def test_dashboard_modules_do_not_import_torch() -> None:
    assert _heavy("import specd.dashboard, specd.commands.dashboard") == ""


def test_cli_help_starts_without_torch() -> None:
    code = ("import sys, runpy; sys.argv = ['specd', {args}]\n"
            "try:\n    runpy.run_module('specd.cli', run_name='__main__')\n"
            "except SystemExit:\n    pass\n"
            "print('LOADED', sorted(m for m in sys.modules if m in ('torch', 'numpy')"
            " or m.startswith('specd.worker')))")
    for args in ("'--help'", "'operator', '--help'", "'db', '--help'"):
        out = subprocess.run([sys.executable, "-c", code.format(args=args)], check=True,
                             capture_output=True, text=True, timeout=60)
        assert out.stdout.strip().endswith("LOADED []"), (args, out.stdout[-300:])


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
