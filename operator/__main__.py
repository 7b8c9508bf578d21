"""``python -m specd.operator``: the operator alone (same flags as ``specd operator``), without
building the whole CLI: the operator image's entry point, and what the tests start."""

from __future__ import annotations

import argparse
import logging
import sys

from specd import SpecdError
from specd.commands import operator as command


def main(argv: list[str] | None = None) -> int:
    parser = argparse.ArgumentParser(prog="python -m specd.operator", description=command.HELP)
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log verbosity")
    command.add_arguments(parser)
    args = parser.parse_args(argv)
    logging.basicConfig(level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return command.run(args)
    except SpecdError as exc:
        print(f"specd operator: error: {exc}", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


if __name__ == "__main__":
    sys.exit(main())
