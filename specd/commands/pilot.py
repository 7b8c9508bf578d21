"""``specd pilot``: run a pilot of speculative decoding against plain decoding and report.

``specd pilot run PILOT.yaml --out DIR`` checks the pilot file and the servers before any
load is sent, then runs the business regression, the capacity sweep and the traces, and
writes the report; ``specd pilot report DIR`` rebuilds the report from what a run wrote
(Markdown + JSON + PNG plots). See docs/pilot/README.md.
"""

from __future__ import annotations

import argparse

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


def run(args: argparse.Namespace) -> int:
    import logging

    from specd.pilot.config import load_pilot

    logging.getLogger("httpx").setLevel(logging.WARNING)  # one line per request otherwise

    if args.pilot == "report":
        from specd.pilot.report import build_report

        rep = build_report(args.dir)
        _print_verdicts(rep, args.dir)
        return 0
    pilot = load_pilot(args.pilot_file)
    if args.check:
        print(f"{args.pilot_file}: ok ({len(pilot.traces)} traces, {pilot.repeats} repeats)")
        return 0
    from specd.pilot.report import build_report
    from specd.pilot.runner import run_pilot

    out = run_pilot(pilot, args.out)
    rep = build_report(out)
    _print_verdicts(rep, str(out))
    return 0


def _print_verdicts(rep: dict, folder: str) -> None:
    for tg, v in rep.get("verdicts", {}).items():
        if not tg.startswith("_"):
            print(f"{tg}: {v['decision']}")
    print(f"report: {folder}/report.md")
