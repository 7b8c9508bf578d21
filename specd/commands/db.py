"""``specd db``: migrate the history store (alembic migrations shipped in the package).

    specd db upgrade sqlite:////var/lib/specd/history.db
    specd db current postgresql+psycopg://specd@db:5432/specd
    specd db downgrade URL [--to base]
"""

from __future__ import annotations

import argparse

from specd import SpecdError

HELP = "migrate the history store (upgrade, current, downgrade)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["upgrade", "current", "downgrade"])
    parser.add_argument("url", help="SQLAlchemy URL: sqlite:///FILE or "
                                    "postgresql+psycopg://USER@HOST:PORT/DB")
    parser.add_argument("--to", default=None,
                        help="target revision (upgrade: head; downgrade: base)")


def run(args: argparse.Namespace) -> int:
    from sqlalchemy.exc import ArgumentError, OperationalError

    from specd.operator.history import store

    try:
        shown = store.masked_url(args.url)
    except ArgumentError as exc:
        raise SpecdError(f"not a database URL: {exc}") from exc

    try:
        if args.action == "upgrade":
            store.upgrade(args.url, args.to or "head")
        elif args.action == "downgrade":
            store.downgrade(args.url, args.to or "base")
        print(store.current(args.url) or "empty (no migration applied)")
    except (ArgumentError, OperationalError) as exc:
        raise SpecdError(f"history store {shown}: {str(exc).splitlines()[0]}") from exc
    return 0
