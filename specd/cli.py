"""The ``specd`` command line: one entry point, one module per subcommand.

Each subcommand lives in ``specd.commands.<name>`` and provides ``HELP`` (one line),
``add_arguments(parser)`` and ``run(args) -> int``. Modules must import heavy libraries
(torch, kopf, streamlit) inside ``run`` only, so ``specd --help`` stays fast and the
operator image never loads torch.
"""

from __future__ import annotations

import argparse
import importlib
import logging
import sys
from collections.abc import Collection, Sequence
from types import ModuleType

from specd import SpecdError, __version__

COMMANDS = ("serve", "generate", "train", "bench", "operator", "dashboard", "cluster", "db")
# The install extra (pyproject.toml) each subcommand's ``run`` needs; the parser itself needs
# only the base install. tests/test_install_extras.py holds every command to its extra.
COMMAND_EXTRAS = {
    "serve": "worker", "generate": "worker", "train": "worker", "bench": "worker",
    "operator": "operator", "db": "operator", "dashboard": "dashboard", "cluster": "dev",
}
COMMANDS, COMMAND_EXTRAS = (*COMMANDS, "pilot"), {**COMMAND_EXTRAS, "pilot": "pilot"}


def build_parser(commands: Collection[str] | None = None) -> argparse.ArgumentParser:
    """The whole parser, or (``commands``) one whose other subcommands carry only their name
    and help: ``main`` builds just the command it runs, so ``specd operator`` never imports
    another command's arguments (``specd serve``'s would load the worker package)."""
    parser = argparse.ArgumentParser(
        prog="specd",
        description="specd: speculative-decoding LLM serving on Kubernetes.",
    )
    parser.add_argument("--version", action="version", version=f"specd {__version__}")
    add_log_level(parser)
    sub = parser.add_subparsers(dest="command", metavar="COMMAND", required=True)
    for name in COMMANDS:
        module = importlib.import_module(f"specd.commands.{name}")
        command = sub.add_parser(name, help=module.HELP, description=module.HELP)
        if commands is None or name in commands:
            module.add_arguments(command)
        command.set_defaults(_module=module)
    return parser


def run_command(name: str, module: ModuleType, args: argparse.Namespace) -> int:
    """Set up logging and run one subcommand, turning SpecdError into one line and exit 2."""
    logging.basicConfig(level=args.log_level,
                        format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    try:
        return int(module.run(args) or 0)
    except SpecdError as exc:
        print(f"specd {name}: error: {exc}", file=sys.stderr)
        return 2
    except ModuleNotFoundError as exc:
        if not exc.name or exc.name.split(".")[0] == "specd":
            raise
        extra = COMMAND_EXTRAS.get(name, "dev")
        print(f"specd {name}: error: needs the '{extra}' extra (missing module {exc.name}): "
              f"pip install 'specd[{extra}]'", file=sys.stderr)
        return 2
    except KeyboardInterrupt:
        return 130


def add_log_level(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--log-level", default="INFO",
                        choices=["DEBUG", "INFO", "WARNING", "ERROR"], help="log verbosity")


def main(argv: Sequence[str] | None = None) -> int:
    words = sys.argv[1:] if argv is None else list(argv)
    args = build_parser([w for w in words if w in COMMANDS][:1]).parse_args(words)
    return run_command(args.command, args._module, args)

if __name__ == "__main__":
    sys.exit(main())
