"""``specd pilot``: run a pilot of speculative decoding against plain decoding and report.

``specd pilot run PILOT.yaml --out DIR`` checks the pilot file and the servers before any
load is sent, then runs the business regression, the capacity sweep and the traces, and
writes the report; ``specd pilot report DIR`` rebuilds the report from what a run wrote
(Markdown + JSON + PNG plots); ``specd pilot record DIR --history-url URL`` writes a
reported run's verdicts into the history store (``--history-url`` on ``run`` and ``report``
does it at the end), where the dashboard's Pilot page reads them. See docs/pilot/README.md.
"""

from __future__ import annotations

import argparse

from specd import SpecdError

HELP = "pilot speculative decoding against plain decoding: traces, accounting, a verdict"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    sub = parser.add_subparsers(dest="pilot", metavar="ACTION", required=True)
    run = sub.add_parser("run", help="run a pilot file against its three groups, then report",
                         description="Start or attach the groups' servers, check, measure "
                                     "capacity, replay the traces, write DIR/report.md.")
    run.add_argument("pilot_file", metavar="PILOT.yaml")
    run.add_argument("--out", required=True, metavar="DIR", help="output folder")
    run.add_argument("--check", action="store_true",
                     help="only validate the pilot file (no servers, no load)")
    report = sub.add_parser("report", help="(re)build the report of a pilot run folder")
    report.add_argument("dir", metavar="DIR")
    record = sub.add_parser("record", help="write a reported run's verdicts to the history "
                                           "store")
    record.add_argument("dir", metavar="DIR")
    for parser_ in (run, report, record):
        parser_.add_argument("--history-url", required=parser_ is record, metavar="URL",
                             help="the history store (SQLAlchemy URL: sqlite:///FILE or "
                                  "postgresql+psycopg://USER@HOST:PORT/DB)")


def run(args: argparse.Namespace) -> int:
    import logging

    from specd.pilot.config import load_pilot

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise

    if args.pilot == "record":
        _record(args.dir, args.history_url)
        return 0
    if args.pilot == "report":
        from specd.pilot.report import build_report

        rep = build_report(args.dir)
        _print_verdicts(rep, args.dir)
        if args.history_url:
            _record(args.dir, args.history_url)
        return 0
    pilot = load_pilot(args.pilot_file)
    if args.check:
        print(f"{args.pilot_file}: ok ({len(pilot.traces)} traces, {pilot.repeats} repeats)")
        return 0
    from specd.pilot.report import build_report
    from specd.pilot.runner import run_pilot

    if args.history_url:
        _store_url(args.history_url)  # a malformed URL is refused before any load is sent
    out = run_pilot(pilot, args.out)
    rep = build_report(out)
    _print_verdicts(rep, str(out))
    if args.history_url:
        _record(out, args.history_url)
    return 0


def _store_url(url: str) -> str:
    """``url`` as it may be printed (password masked); SpecdError if it is no database URL."""
    from sqlalchemy.exc import ArgumentError

    from specd.operator.history.store import masked_url

    try:
        return masked_url(url)
    except ArgumentError as exc:
        raise SpecdError(f"--history-url: not a database URL: {exc}") from exc


def _record(folder: object, url: str) -> None:
    from sqlalchemy.engine import make_url
    from sqlalchemy.exc import SQLAlchemyError

    from specd.pilot.history import NotARun, record

    shown = _store_url(url)
    try:
        written, total = record(str(folder), url)
    except NotARun as exc:
        raise SpecdError(str(exc)) from exc
    except SQLAlchemyError as exc:
        why = str(getattr(exc, "orig", None) or exc).splitlines()[0]
        password = make_url(url).password
        if password:  # a driver may echo the URL it was given: never a secret in a message
            why = why.replace(str(password), "***")
        raise SpecdError(f"history store {shown}: {why}") from exc
    print(f"history store {shown}: {written} of {total} verdicts written"
          + (" (recorded before)" if total and not written else ""))


def _print_verdicts(rep: dict, folder: str) -> None:
    for tg, v in rep.get("verdicts", {}).items():
        if not tg.startswith("_"):
            print(f"{tg}: {v['decision']}")
    print(f"report: {folder}/report.md")
