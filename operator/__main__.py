"""``python -m specd.operator``: the operator alone (same flags as ``specd operator``), without
building the whole CLI: the operator image's entry point, and what the tests start."""

from __future__ import annotations

import argparse
import sys

from specd.cli import add_log_level, run_command
from specd.commands import operator as command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specd.operator", description=command.HELP)
    add_log_level(parser)
    command.add_arguments(parser)
    return run_command("operator", command, parser.parse_args(argv))


if __name__ == "__main__":
    sys.exit(main())
