"""``specd cluster``: build, start and stop the local Kubernetes control plane (development
tooling: the code is ``specd_dev.cluster`` in ``tools/``, installed from a checkout only).

``build`` compiles etcd, the Kubernetes components, kwok and helm once into the cache;
``up`` starts a cluster on 127.0.0.1 with fake GPU nodes (building first if needed, and
doing nothing if it already runs); ``down`` stops it; ``status`` shows each component;
``kubeconfig`` prints the running cluster's kubeconfig path (``export KUBECONFIG=$(specd
cluster kubeconfig)``); ``url svc/NAME [-n NS]`` prints a Service's loopback URL (HAProxy over
its Ready endpoints); ``prometheus-url`` the cluster's Prometheus; ``logs POD [-n NS]`` the
log of a pod the pod runner runs.
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specd import SpecdError

HELP = "build, start and stop the local Kubernetes control plane (fake GPU nodes)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["build", "up", "down", "status", "kubeconfig", "url",
                                           "prometheus-url", "logs"])
    parser.add_argument("target", nargs="?", default=None,
                        help="url: svc/NAME; logs: POD")
    parser.add_argument("-n", "--namespace", default="default",
                        help="namespace of the Service or pod (default: default)")
    parser.add_argument("--port", default=None,
                        help="url: the Service port's name or number (default: its only port)")
    parser.add_argument("--max-processes", type=int, default=None,
                        help="up: most pod processes the pod runner runs at once, besides "
                             "its memory budget (80%% of available memory); applies to a "
                             "running cluster too")
    parser.add_argument("--name", default="specd", help="cluster name (default: specd)")
    parser.add_argument("--state-dir", type=Path, default=None,
                        help="where state, kubeconfig and logs live "
                             "(default: ~/.cache/specd/clusters/<name>)")
    parser.add_argument("--nodes", type=int, default=2, help="fake GPU nodes (default 2)")
    parser.add_argument("--gpus-per-node", type=int, default=8,
                        help="nvidia.com/gpu each node advertises (default 8)")
    parser.add_argument("--timeout", type=float, default=120.0,
                        help="seconds to wait for readiness (default 120)")


def run(args: argparse.Namespace) -> int:
    try:
        from specd_dev.cluster import build, control_plane
        from specd_dev.cluster.runner import state as runner_state
    except ModuleNotFoundError as exc:
        if exc.name and exc.name.split(".")[0] == "specd_dev":
            raise SpecdError("'specd cluster' is development tooling, not part of the specd "
                             "package: from a checkout, pip install -e tools/ (make setup "
                             "does)") from exc
        raise

    if args.nodes < 1 or args.gpus_per_node < 0 or args.timeout <= 0:
        raise SpecdError("--nodes must be >= 1, --gpus-per-node >= 0 and --timeout > 0")
    state_dir = args.state_dir or control_plane.default_state_dir(args.name)
    if args.action == "build":
        print(build.build())
        return 0
    if args.action == "up":
        if args.max_processes is not None and args.max_processes < 1:
            raise SpecdError("--max-processes must be >= 1")
        shape = control_plane.NodeShape(count=args.nodes, gpus=args.gpus_per_node)
        if args.max_processes is not None:
            runner_state.set_max_processes(state_dir, args.max_processes)
        control_plane.up(state_dir, name=args.name, shape=shape, timeout=args.timeout)
        return 0
    if args.action == "down":
        if not control_plane.down(state_dir, name=args.name):
            print(f"no cluster state in {state_dir}: nothing to stop")
        return 0
    if args.action == "status":
        report = control_plane.status(state_dir)
        if not report:
            print(f"cluster '{args.name}': not running (no state in {state_dir})")
            return 1
        for component, state in report.items():
            print(f"{component:<24} {state}")
        _print_pods(runner_state.read(state_dir))
        return 0 if control_plane.is_up(state_dir) else 1
    if not control_plane.is_up(state_dir):
        raise SpecdError(f"cluster '{args.name}' is not running; start it with 'specd cluster up'")
    if args.action == "kubeconfig":
        print(state_dir / "kubeconfig")
    elif args.action == "prometheus-url":
        state = control_plane.read_state(state_dir)
        assert state is not None
        print(f"http://127.0.0.1:{state.ports.prometheus}")
    elif args.action == "url":
        if not args.target or not args.target.startswith(("svc/", "service/")):
            raise SpecdError("usage: specd cluster url svc/NAME [-n NAMESPACE] [--port NAME]")
        name = args.target.split("/", 1)[1]
        published = runner_state.read(state_dir)
        url = published.url(args.namespace, name, args.port) if published else None
        if url is None:
            raise SpecdError(f"no URL for service {args.namespace}/{name}"
                             + (f" port {args.port}" if args.port else "")
                             + ": does the Service exist (with a selector)?")
        print(url)
    else:  # logs
        if not args.target:
            raise SpecdError("usage: specd cluster logs POD [-n NAMESPACE]")
        print(runner_state.pod_log(state_dir, args.namespace, args.target).read_text(
            errors="replace"), end="")
    return 0


def _print_pods(published: object) -> None:
    from specd_dev.cluster.runner.state import RunnerState, rss_bytes

    if not isinstance(published, RunnerState):
        return
    print(f"\npod processes ({published.capacity})")
    if not published.pods:
        print("  none")
    for pod in published.pods:
        rss = rss_bytes(pod.get("pid"))
        ports = ",".join(f"{k}->{v}" for k, v in pod.get("ports", {}).items()) or "-"
        print(f"  {pod['namespace']}/{pod['pod']:<40} pid {pod.get('pid') or '-':<8} "
              f"ports {ports:<14} rss {f'{rss / 2**20:.0f} MiB' if rss else '-':<9} "
              f"{'ready' if pod.get('ready') else (pod.get('waiting') or 'not ready')}"
              f" restarts {pod.get('restarts', 0)}")
