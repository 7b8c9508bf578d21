"""``specd cluster``: build, start and stop the local Kubernetes control plane.

``build`` compiles etcd, the Kubernetes components, kwok and helm once into the cache;
``up`` starts a cluster on 127.0.0.1 with fake GPU nodes (building first if needed, and
doing nothing if it already runs); ``down`` stops it; ``status`` shows each component;
``kubeconfig`` prints the running cluster's kubeconfig path (``export KUBECONFIG=$(specd
cluster kubeconfig)``).
"""

from __future__ import annotations

import argparse
from pathlib import Path

from specd import SpecdError

HELP = "build, start and stop the local Kubernetes control plane (fake GPU nodes)"


def add_arguments(parser: argparse.ArgumentParser) -> None:
    parser.add_argument("action", choices=["build", "up", "down", "status", "kubeconfig"])
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
    from specd.cluster import build, control_plane

    if args.nodes < 1 or args.gpus_per_node < 0 or args.timeout <= 0:
        raise SpecdError("--nodes must be >= 1, --gpus-per-node >= 0 and --timeout > 0")
    state_dir = args.state_dir or control_plane.default_state_dir(args.name)
    if args.action == "build":
        print(build.build())
        return 0
    if args.action == "up":
        shape = control_plane.NodeShape(count=args.nodes, gpus=args.gpus_per_node)
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
        return 0 if control_plane.is_up(state_dir) else 1
    # kubeconfig
    if not control_plane.is_up(state_dir):
        raise SpecdError(f"cluster '{args.name}' is not running; start it with 'specd cluster up'")
    print(state_dir / "kubeconfig")
    return 0
