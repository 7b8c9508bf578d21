"""``kubectl specd VERB``: list, get, status, history and the rollout controls.

    kubectl specd list [-n NS | -A]
    kubectl specd get NAME [-w]
    kubectl specd status NAME [-w] [--timeout 5m]     exit 0 healthy, 1 degraded or rolled
                                                      back, 2 timeout, 3 still progressing
                                                      (4: the API refused, e.g. 403)
    kubectl specd promote NAME [--full] | pause NAME | resume NAME | abort NAME | retry NAME
    kubectl specd history NAME --history-url URL [--measurements] [--limit N]
                                                      every past rollout from the history
                                                      store (4: the store cannot be read)
    kubectl specd history NAME                        without a URL: the object's Events
    kubectl specd policy NAME [--group G --pin|--unpin]
                                                      the tuner's state per task group; pin
                                                      (or unpin) a group to stop (or resume)
                                                      its tuning

Credentials and namespace come from the kubeconfig as kubectl reads them (``--kubeconfig``,
``$KUBECONFIG``, ``--context``, the context's namespace). Every control is one merge patch
from ``specd.operator.rollout.controls``, recorded with the kubeconfig user as the actor.

``history`` reads the operator's history store (``specd operator --history-url``; here
``--history-url`` or ``$SPECD_HISTORY_URL``: ``sqlite:///FILE`` or
``postgresql+psycopg://USER@HOST:PORT/DB``) through ``specd.operator.history.queries``: one
block per rollout, newest first (start, stable -> canary, outcome Promoted / RolledBack /
Cleared / Superseded / in progress, duration, who promoted or aborted), then its events
(time, step, weight, action, actor, reason) and, with ``--measurements``, its analysis
measurements. URLs are printed with the password masked. Without a store it prints the
object's Kubernetes Events (the API server keeps them for about an hour) and says so on
stderr.
"""

from __future__ import annotations

import argparse
import getpass
import os
import sys
import time
from collections.abc import Sequence
from datetime import UTC, datetime
from typing import Any

from specd.api import k8s
from specd.kubectl import render

CONTROLS = {"promote": "promote", "pause": "pause", "resume": "resume", "abort": "abort",
            "retry": "retry"}
EXIT_API_ERROR = 4  # the API refused, or the history store cannot be read
DONE = {"promote": "promoted", "promote-full": "promoted to the end", "pause": "paused",
        "resume": "resumed", "abort": "aborted", "retry": "retrying"}


def parser() -> argparse.ArgumentParser:
    p = argparse.ArgumentParser(prog="kubectl specd",
                                description="SpeculativeServices: rollouts and their controls")
    p.add_argument("--kubeconfig", default=None)
    p.add_argument("--context", default=None)
    p.add_argument("-n", "--namespace", default=None)
    verbs = p.add_subparsers(dest="verb", required=True, metavar="VERB")
    listing = verbs.add_parser("list", help="every SpeculativeService with its rollout")
    listing.add_argument("-A", "--all-namespaces", action="store_true")
    for verb, text in (("get", "one service: steps, weights, the latest analysis"),
                       ("status", "healthy (0), degraded or rolled back (1), timeout (2), "
                                  "progressing (3)"),
                       ("history", "the service's past rollouts and their events")):
        sub = verbs.add_parser(verb, help=text)
        sub.add_argument("name")
        if verb in ("get", "status"):
            sub.add_argument("-w", "--watch", action="store_true")
        if verb == "status":
            sub.add_argument("--timeout", default="10m",
                             help="with --watch: give up after this long (default 10m)")
        if verb == "history":
            sub.add_argument("--history-url", default=None, metavar="URL",
                             help="the operator's history store: sqlite:///FILE or "
                                  "postgresql+psycopg://USER@HOST:PORT/DB [env "
                                  "SPECD_HISTORY_URL]; without it, the object's Events")
            sub.add_argument("--measurements", action="store_true",
                             help="also each rollout's analysis measurements")
            sub.add_argument("--limit", type=int, default=20, metavar="N",
                             help="the newest N rollouts (default 20; 0: all)")
    policy = verbs.add_parser("policy", help="the tuner's state per task group; pin a group")
    policy.add_argument("name")
    policy.add_argument("--group", default=None, help="the task group to pin or unpin")
    pinning = policy.add_mutually_exclusive_group()
    pinning.add_argument("--pin", action="store_true", help="stop tuning the group")
    pinning.add_argument("--unpin", action="store_true", help="tune the group again")
    for verb, text in (("promote", "go to the next step (--full: to the end)"),
                       ("pause", "hold the rollout where it is"),
                       ("resume", "continue a paused rollout"),
                       ("abort", "send all traffic back to stable"),
                       ("retry", "start an aborted or rolled-back rollout again")):
        sub = verbs.add_parser(verb, help=text)
        sub.add_argument("name")
        if verb == "promote":
            sub.add_argument("--full", action="store_true")
    return p


def _context(kubeconfig: str | None, context: str | None) -> dict[str, Any]:
    from kubernetes import config

    contexts, active = config.list_kube_config_contexts(config_file=kubeconfig)
    chosen = next((c for c in contexts if c["name"] == context), active) if context \
        else active
    return dict(chosen.get("context") or {})


def default_namespace(kubeconfig: str | None, context: str | None) -> str:
    """The context's namespace, as kubectl picks it; "default" without a kubeconfig."""
    from kubernetes.config import ConfigException

    try:
        return _context(kubeconfig, context).get("namespace") or "default"
    except ConfigException:
        return "default"


class Client:
    def __init__(self, kubeconfig: str | None, context: str | None) -> None:
        from kubernetes import client, config

        self.api = config.new_client_from_config(config_file=kubeconfig, context=context)
        chosen = _context(kubeconfig, context)
        self.default_namespace = chosen.get("namespace") or "default"
        self.user = chosen.get("user") or getpass.getuser()
        self.custom = client.CustomObjectsApi(self.api)
        self.core = client.CoreV1Api(self.api)

    def get(self, namespace: str, name: str) -> dict[str, Any]:
        return self.custom.get_namespaced_custom_object(k8s.GROUP, k8s.VERSION, namespace,
                                                        k8s.PLURAL, name)

    def list(self, namespace: str | None) -> list[dict[str, Any]]:
        if namespace is None:
            return self.custom.list_cluster_custom_object(k8s.GROUP, k8s.VERSION,
                                                          k8s.PLURAL)["items"]
        return self.custom.list_namespaced_custom_object(k8s.GROUP, k8s.VERSION, namespace,
                                                         k8s.PLURAL)["items"]

    def events(self, namespace: str, name: str) -> list[dict[str, Any]]:
        events = self.core.list_namespaced_event(
            namespace, field_selector=f"involvedObject.name={name},"
                                      f"involvedObject.kind={k8s.KIND}")
        return [self.api.sanitize_for_serialization(e) for e in events.items]


def main(argv: Sequence[str] | None = None) -> int:
    from kubernetes.client.exceptions import ApiException

    from specd.operator.rollout import controls
    from specd.operator.rollout.canary import parse_duration
    from specd.operator.tuner import controls as tuner_controls

    args = parser().parse_args(argv)
    if args.verb == "history":
        url = args.history_url or os.environ.get("SPECD_HISTORY_URL")
        if url and url != "none":  # "none": the operator's word for no store
            return history_from_store(
                url, args.namespace or default_namespace(args.kubeconfig, args.context),
                args.name, measurements=args.measurements, limit=args.limit or None)
    try:
        kube = Client(args.kubeconfig, args.context)
        namespace = args.namespace or kube.default_namespace
        if args.verb == "list":
            scope = None if args.all_namespaces else namespace
            objects = kube.list(scope)
            if not objects:
                print(f"no SpeculativeServices in {'any namespace' if scope is None else scope}")
                return 0
            print(render.list_table(objects, datetime.now(UTC), namespaces=scope is None))
            return 0
        if args.verb in ("promote", "pause", "resume", "abort", "retry"):
            action = "promote-full" if args.verb == "promote" and args.full else args.verb
            controls.apply(kube.custom, namespace, args.name, action,  # type: ignore[arg-type]
                           actor=f"kubectl-specd/{kube.user}", field_manager="kubectl-specd")
            print(f"specsvc/{args.name} {DONE[action]}")
            return 0
        if args.verb == "policy":
            if args.pin or args.unpin:
                if not args.group:
                    print("error: --pin/--unpin need --group G", file=sys.stderr)
                    return 2
                try:
                    tuner_controls.pin(kube.custom, namespace, args.name, args.group,
                                       args.pin, actor=f"kubectl-specd/{kube.user}",
                                       field_manager="kubectl-specd")
                except ValueError as exc:
                    print(f"error: {exc}", file=sys.stderr)
                    return 2
                print(f"specsvc/{args.name} {args.group} {'pinned' if args.pin else 'unpinned'}")
                return 0
            print(render.policy_table(kube.get(namespace, args.name)))
            return 0
        if args.verb == "history":
            print(render.history(kube.events(namespace, args.name)))
            print("note: these are the object's Kubernetes Events (kept about an hour); the "
                  "history store has every rollout: --history-url URL or $SPECD_HISTORY_URL",
                  file=sys.stderr)
            return 0
        if args.verb == "get":
            while True:
                text = render.detail(kube.get(namespace, args.name))
                if not args.watch:
                    print(text)
                    return 0
                print("\033[2J\033[H" + text, flush=True)
                time.sleep(2)
        # status
        deadline = time.monotonic() + parse_duration(args.timeout)
        while True:
            code, line = render.status_line(kube.get(namespace, args.name))
            if not args.watch or code != render.EXIT_PROGRESSING:
                print(line)
                return code
            if time.monotonic() > deadline:
                print(f"timed out after {args.timeout}: {line}")
                return render.EXIT_TIMEOUT
            time.sleep(1)
    except ApiException as exc:
        reason = "permission denied" if exc.status == 403 else (exc.reason or "error")
        print(f"error: {reason} ({exc.status}): {_message(exc)}", file=sys.stderr)
        return EXIT_API_ERROR
    except KeyboardInterrupt:
        return 130


def history_from_store(url: str, namespace: str, name: str, *, measurements: bool = False,
                       limit: int | None = None) -> int:
    """``kubectl specd history NAME --history-url URL``: 0, 2 (not a URL), 4 (unreadable)."""
    from specd.operator.history import read, store

    try:
        rollouts, total = read.rollouts(url, namespace, name, measurements=measurements,
                                        limit=limit)
    except read.NotAURL as exc:
        print(f"error: --history-url is {exc}", file=sys.stderr)
        return 2
    except read.Unreadable as exc:
        print(f"error: {exc}", file=sys.stderr)
        return EXIT_API_ERROR
    shown = store.masked_url(url)
    if not rollouts:
        print(f"no rollouts of {namespace}/{name} in the history store {shown}")
        return 0
    print(f"{namespace}/{name}: {total} rollout{'s' if total != 1 else ''}, newest first "
          f"(history store {shown})\n")
    print(render.rollout_history(rollouts, datetime.now(UTC), measurements=measurements,
                                 total=total))
    return 0


def _message(exc: Any) -> str:
    import json

    try:
        return str(json.loads(exc.body).get("message", ""))
    except (TypeError, ValueError, AttributeError):
        return ""


if __name__ == "__main__":
    sys.exit(main())
