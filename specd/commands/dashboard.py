"""``specd dashboard``: not built yet (see the open issues)."""

from __future__ import annotations

import argparse

from specd import SpecdError

HELP = "dashboard (not built yet)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    pass


def run(args: argparse.Namespace) -> int:
    raise SpecdError("'specd dashboard' is not built yet")
