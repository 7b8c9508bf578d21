"""``specd operator``: run the SpeculativeService operator (kopf + the kubernetes client)."""

from __future__ import annotations

import argparse
import os

from specd import SpecdError

HELP = "run the operator that turns SpeculativeServices into GPU worker Deployments"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("--namespace", "-n", action="append", default=[], metavar="NS",
                        help="watch only this namespace (repeatable; glob patterns allowed); "
                             "default: all namespaces")
    parser.add_argument("--kubeconfig", default=os.environ.get("KUBECONFIG"),
                        help="kubeconfig file (default: $KUBECONFIG, else in-cluster, "
                             "else ~/.kube/config)")
    parser.add_argument("--bind", default="0.0.0.0",
                        help="address of the health and metrics endpoints (default 0.0.0.0)")
    parser.add_argument("--health-port", type=int, default=8080,
                        help="port of the liveness endpoint GET /healthz (default 8080)")
    parser.add_argument("--metrics-port", type=int, default=9090,
                        help="port of the Prometheus endpoint GET /metrics (default 9090)")
    parser.add_argument("--resync", type=float, default=300.0, metavar="SECONDS",
                        help="re-apply every object this often, repairing drift (default 300)")
    parser.add_argument("--workers", type=int, default=8,
                        help="threads running reconciles concurrently (default 8)")
    parser.add_argument("--prometheus-url", default=os.environ.get("SPECD_PROMETHEUS_URL"),
                        help="Prometheus that canary analysis queries (e.g. "
                             "http://prometheus.monitoring:9090; env SPECD_PROMETHEUS_URL); "
                             "without it a configured analysis measures Error")
    parser.add_argument("--history-url", default=os.environ.get("SPECD_HISTORY_URL",
                                                                default_history_url()),
                        help="the history store: sqlite:///FILE (default "
                             "$XDG_STATE_HOME/specd/history.db) or postgresql+psycopg://...; "
                             "'none' keeps no history [env SPECD_HISTORY_URL]")
    parser.add_argument("--pod-address-map", default=os.environ.get("SPECD_POD_ADDRESS_MAP"),
                        metavar="FILE",
                        help="JSON object translating \"podIP:port\" to a reachable "
                             "\"host:port\" for the lossless probes, when the operator runs "
                             "outside the pod network (the local cluster's pod runner writes "
                             "one); default: pods are reached at their IP "
                             "[env SPECD_POD_ADDRESS_MAP]")
    parser.add_argument("--own-namespace", default=own_namespace(), metavar="NS",
                        help="the operator's namespace, let through a service's worker "
                             "NetworkPolicy when spec.network.allowFrom is set (its probes "
                             "call the pods); default: the pod's own (the ServiceAccount's "
                             "namespace file), else $SPECD_OPERATOR_NAMESPACE")
    parser.add_argument("--no-migrate", action="store_true",
                        help="do not migrate the history store at start-up")


SERVICE_ACCOUNT_NAMESPACE = "/var/run/secrets/kubernetes.io/serviceaccount/namespace"


def own_namespace() -> str | None:
    try:
        with open(SERVICE_ACCOUNT_NAMESPACE) as f:
            return f.read().strip() or None
    except OSError:
        return os.environ.get("SPECD_OPERATOR_NAMESPACE") or None


def default_history_url() -> str:
    state = os.environ.get("XDG_STATE_HOME") or os.path.join(os.path.expanduser("~"),
                                                             ".local", "state")
    return f"sqlite:///{os.path.join(state, 'specd', 'history.db')}"


def run(args: argparse.Namespace) -> int:
    if args.kubeconfig and not all(os.path.isfile(p) for p in args.kubeconfig.split(os.pathsep)):
        raise SpecdError(f"kubeconfig not found: {args.kubeconfig}")
    if args.resync <= 0 or args.workers < 1:
        raise SpecdError("--resync must be > 0 and --workers >= 1")
    if args.kubeconfig:
        os.environ["KUBECONFIG"] = os.pathsep.join(
            os.path.abspath(p) for p in args.kubeconfig.split(os.pathsep))

    import kopf

    from specd.operator import metrics
    from specd.operator.handlers import OperatorConfig, register

    def history_url(url: str | None) -> str | None:
        if not url or url == "none":
            return None
        if url.startswith("sqlite:///"):  # the file's folder must exist for SQLite
            os.makedirs(os.path.dirname(url.removeprefix("sqlite:///")) or ".", exist_ok=True)
        return url

    registry = kopf.OperatorRegistry()
    if args.prometheus_url and not args.prometheus_url.startswith(("http://", "https://")):
        raise SpecdError(f"--prometheus-url must be an http(s) URL, not {args.prometheus_url!r}")
    register(registry, OperatorConfig(kubeconfig=args.kubeconfig,
                                      resync_seconds=args.resync, max_workers=args.workers,
                                      prometheus_url=args.prometheus_url,
                                      history_url=history_url(args.history_url),
                                      migrate=not args.no_migrate,
                                      pod_address_map=args.pod_address_map,
                                      own_namespace=args.own_namespace))
    try:
        metrics.serve(args.metrics_port, args.bind)
    except OSError as exc:
        raise SpecdError(
            f"cannot serve metrics on {args.bind}:{args.metrics_port}: {exc}") from exc
    kopf.run(
        registry=registry,
        standalone=True,  # one replica; no peering objects needed
        clusterwide=not args.namespace,
        namespaces=args.namespace,
        liveness_endpoint=f"http://{args.bind}:{args.health_port}/healthz",
    )
    return 0
