"""Services reachable from this machine: HAProxy (Debian's) in front of the runner's pods.

Each Service port gets a stable loopback port (a frontend); its backend lists the Ready
endpoints of the Service's EndpointSlices, each endpoint mapped through its targetRef pod to
the loopback port the runner gave that pod's container port. Endpoints that are not Ready,
or pods kwok only simulates, get no server, so they get no traffic; as with kube-proxy,
terminating endpoints that still serve are used when no endpoint is Ready. When the set changes the
runner rewrites the configuration, checks it (``haproxy -c``) and sends SIGUSR2 to the
master process (master-worker mode): new connections use the new servers, in-flight
requests finish on the old worker. The reload is asynchronous (the master starts a new
worker, then tells the old one to stop listening), so ``reload`` returns only once the
health frontend answers with the new configuration's digest, several times over fresh
connections: a caller that publishes "this Service has a server" after it never sends a
request into the old worker's empty backend (that race cost a test 83 503s in 0.1 s).

A connection refused by a server (a pod stopping just before its endpoint is dropped, the
race every load balancer in front of Kubernetes has) is retried and redispatched to another
server, as HAProxy's ``retries``/``option redispatch`` do in front of real clusters: only
connection failures are retried, so a request is never sent twice.
"""

from __future__ import annotations

import hashlib
import os
import re
import signal
import subprocess
import time
import urllib.request
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specd import SpecdError

BINARY = "/usr/sbin/haproxy"
# Long generations stream for minutes: generous client/server timeouts.
TIMEOUT_S = 600
# How long a reload may take before it counts as failed (the runner logs it and retries),
# and how many fresh connections in a row must reach the new worker.
RELOAD_TIMEOUT_S = 30.0
RELOAD_CONFIRMATIONS = 5


@dataclass(frozen=True)
class Frontend:
    namespace: str
    service: str
    port_name: str
    service_port: int
    local_port: int
    servers: tuple[tuple[str, int], ...]  # (pod name, loopback port)

    @property
    def ident(self) -> str:
        return re.sub(r"[^A-Za-z0-9_.-]", "_",
                      f"{self.namespace}.{self.service}.{self.port_name or self.service_port}")


def service_ports(service: Mapping[str, Any]) -> list[tuple[str, int]]:
    return [(p.get("name", ""), int(p["port"])) for p in service["spec"].get("ports", [])]


def ready_servers(slices: Iterable[Mapping[str, Any]], port_name: str,
                  local_port: Callable[[str, int], int | None]) -> tuple[tuple[str, int], ...]:
    """(pod, loopback port) for every Ready endpoint of the slices serving ``port_name``
    (else every serving, terminating one); ``local_port(pod, container_port)`` is None for
    pods the runner does not run."""
    ready, terminating = set(), set()
    for endpoint_slice in slices:
        ports = [p for p in endpoint_slice.get("ports") or [] if p.get("name", "") == port_name]
        for endpoint in endpoint_slice.get("endpoints") or []:
            ref = endpoint.get("targetRef") or {}
            conditions = endpoint.get("conditions") or {}
            if ref.get("kind") != "Pod":
                continue
            if conditions.get("ready"):
                into = ready
            elif conditions.get("serving") and conditions.get("terminating"):
                into = terminating
            else:
                continue
            for port in ports:
                local = local_port(ref["name"], int(port["port"]))
                if local is not None:
                    into.add((str(ref["name"]), local))
    # kube-proxy's rule: terminating endpoints that still serve get traffic only when no
    # endpoint is ready (a whole Deployment rolling over), rather than refusing it all.
    return tuple(sorted(ready or terminating))


def frontends(services: Iterable[Mapping[str, Any]], slices: Iterable[Mapping[str, Any]],
              allocated: Mapping[str, int], allocate: Callable[[], int],
              local_port: Callable[[str, str, int], int | None]) -> list[Frontend]:
    """One frontend per port of every Service with a selector. ``allocated`` maps
    ``ns/name/port`` to a loopback port kept from earlier syncs; ``allocate()`` gives new ones."""
    by_service: dict[tuple[str, str], list[Mapping[str, Any]]] = {}
    for endpoint_slice in slices:
        meta = endpoint_slice["metadata"]
        owner = (meta.get("labels") or {}).get("kubernetes.io/service-name")
        if owner:
            by_service.setdefault((meta["namespace"], owner), []).append(endpoint_slice)
    out = []
    for service in services:
        if not service["spec"].get("selector"):
            continue
        ns, name = service["metadata"]["namespace"], service["metadata"]["name"]
        for port_name, port in service_ports(service):
            key = url_key(ns, name, port_name or str(port))
            local = allocated.get(key) or allocate()
            servers = ready_servers(by_service.get((ns, name), []), port_name,
                                    lambda pod, cport, ns=ns: local_port(ns, pod, cport))
            out.append(Frontend(ns, name, port_name, port, local, servers))
    return out


def url_key(namespace: str, service: str, port: str) -> str:
    return f"{namespace}/{service}/{port}"


def config_text(fronts: Iterable[Frontend], health_port: int) -> str:
    """The whole configuration; its health frontend answers ``ok <digest>``, the digest
    naming the frontends below it, so a caller can tell which configuration is live."""
    body: list[str] = []
    for front in sorted(fronts, key=lambda f: f.ident):
        body += [
            f"frontend {front.ident}",
            f"    bind 127.0.0.1:{front.local_port}",
            f"    default_backend {front.ident}",
            f"backend {front.ident}",
            "    balance roundrobin",
        ]
        body += [f"    server {pod} 127.0.0.1:{port}" for pod, port in front.servers]
    lines = [
        "# written by the specd pod runner; rewritten whenever endpoints change",
        "global",
        "    log stderr format short local0 notice",
        "    maxconn 4096",
        "defaults",
        "    mode http",
        "    log global",
        "    option dontlognull",
        "    retries 3",
        "    option redispatch 1",
        "    timeout connect 5s",
        f"    timeout client {TIMEOUT_S}s",
        f"    timeout server {TIMEOUT_S}s",
        "    timeout http-request 30s",
        "frontend specd_proxy_health",
        f"    bind 127.0.0.1:{health_port}",
        "    http-request return status 200 content-type text/plain "
        f"string \"ok {digest(body)}\"",
    ]
    return "\n".join(lines + body) + "\n"


def digest(body: Iterable[str]) -> str:
    return hashlib.sha256("\n".join(body).encode()).hexdigest()[:16]


def health_answer(text: str) -> str:
    """What the health frontend of configuration ``text`` answers."""
    match = re.search(r'string "(ok [0-9a-f]+)"', text)
    if not match:
        raise SpecdError("no health answer in the HAProxy configuration")
    return match.group(1)


def argv(config: Path, pidfile: Path, binary: str = BINARY) -> list[str]:
    """Master-worker mode in the foreground; SIGUSR2 to the master reloads the config."""
    return [binary, "-W", "-db", "-f", str(config), "-p", str(pidfile)]


def check(config: Path, binary: str = BINARY) -> None:
    result = subprocess.run([binary, "-c", "-q", "-f", str(config)], capture_output=True,
                            text=True, timeout=30)
    if result.returncode != 0:
        raise SpecdError(f"haproxy refused {config}: {result.stdout}{result.stderr}".strip())


def reload(config: Path, text: str, pidfile: Path, health_port: int, binary: str = BINARY,
           timeout: float = RELOAD_TIMEOUT_S) -> None:
    """Write ``text`` to ``config`` (checked first), signal the master to reload and return
    once the new worker serves it."""
    candidate = config.with_suffix(".next")
    candidate.write_text(text)
    check(candidate, binary)
    os.replace(candidate, config)
    master = int(pidfile.read_text().split()[0])
    os.kill(master, signal.SIGUSR2)
    wait_serving(health_port, health_answer(text), timeout)


def wait_serving(health_port: int, answer: str, timeout: float = RELOAD_TIMEOUT_S,
                 confirmations: int = RELOAD_CONFIRMATIONS) -> None:
    """Poll the health frontend until ``confirmations`` fresh connections in a row get
    ``answer``: the old worker keeps accepting for a moment after the new one is up."""
    deadline = time.monotonic() + timeout
    streak, last = 0, "nothing"
    while streak < confirmations:
        if time.monotonic() > deadline:
            raise SpecdError(f"HAProxy did not serve its new configuration within {timeout:.0f}"
                             f" s: the health frontend answered {last!r}, not {answer!r}")
        try:
            with urllib.request.urlopen(f"http://127.0.0.1:{health_port}/",
                                        timeout=2) as response:
                last = response.read().decode(errors="replace").strip()
        except OSError as exc:
            last = str(exc)
        if last == answer:
            streak += 1
        else:
            streak = 0
            time.sleep(0.02)
