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

    registry = kopf.OperatorRegistry()
    if args.prometheus_url and not args.prometheus_url.startswith(("http://", "https://")):
        raise SpecdError(f"--prometheus-url must be an http(s) URL, not {args.prometheus_url!r}")
    register(registry, OperatorConfig(kubeconfig=args.kubeconfig,
                                      resync_seconds=args.resync, max_workers=args.workers,
                                      prometheus_url=args.prometheus_url))
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
