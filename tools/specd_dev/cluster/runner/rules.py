"""Which pods the pod runner runs, and how a container's argv and env become a local process.

Pure functions over Pod dicts (the API's JSON): no I/O, no clock.

A pod is the runner's when one of its containers' ``command`` holds a ``specd`` executable
followed by an entry point (``serve``, ``operator``, ``dashboard``), unless that container's
env sets ``LOCAL_POD_RUNNER=simulate``. The manifest builders set
``command`` explicitly for that reason (an image's ENTRYPOINT is invisible from the API).
kwok's pod stages skip the same pods with the jq expression :data:`KWOK_SKIP_KEY`; the unit
tests check both rules agree.

What changes between the container and the local process, and nothing else:

- a leading ``tini --`` is dropped (the runner does tini's job: its own process group,
  signals to the group, reaping);
- listen addresses ``0.0.0.0`` / ``::`` -> ``127.0.0.1``;
- each declared container port -> a free loopback port, wherever the argv gives it after a
  flag whose name ends in ``port`` or an env var named ``*PORT`` holds it;
- each volume mount path -> the local directory standing in for the volume;
- ``$(VAR)`` references expand as the kubelet expands them;
- ``OMP_NUM_THREADS`` follows the CPU limit (else request; at least 1), since every process
  shares this machine's cores.
"""

from __future__ import annotations

import math
import os
import re
from collections.abc import Mapping
from typing import Any

ENTRY_POINTS = ("serve", "operator", "dashboard")
# A container with LOCAL_POD_RUNNER=simulate stays kwok's (tests of pure reconcile logic that
# would otherwise start a model per pod). Not SPECD_*: the CRD reserves that prefix.
SIMULATE_ENV = "LOCAL_POD_RUNNER"

# gojq (kwok) and jq: true when a container's command runs a specd entry point.
KWOK_SKIP_KEY = (
    '[.spec.containers[]?'
    ' | select([(.env // [])[] | select(.name == "LOCAL_POD_RUNNER" and .value == "simulate")]'
    ' | length == 0)'
    ' | (.command // []) as $c | range(0; ($c | length) - 1)'
    ' | select(($c[.] | split("/") | last) == "specd"'
    ' and ($c[. + 1] | IN("serve", "operator", "dashboard")))] | length > 0'
)

LOCAL_HOST = "127.0.0.1"
WILDCARD_HOSTS = ("0.0.0.0", "::", "[::]")
_VAR_REF = re.compile(r"\$\$|\$\(([A-Za-z_][A-Za-z0-9_.-]*)\)")

Pod = Mapping[str, Any]


class PodSpecError(ValueError):
    """The pod asks for something the runner cannot give (its message says what)."""


def entry_point(container: Mapping[str, Any]) -> str | None:
    """``serve`` / ``operator`` / ``dashboard`` when ``command`` runs a specd entry point
    (and the container does not ask to stay simulated)."""
    if any(e.get("name") == SIMULATE_ENV and e.get("value") == "simulate"
           for e in container.get("env") or []):
        return None
    command = list(container.get("command") or [])
    for index in range(len(command) - 1):
        if os.path.basename(command[index]) == "specd" and command[index + 1] in ENTRY_POINTS:
            return str(command[index + 1])
    return None


def is_runner_pod(pod: Pod) -> bool:
    return any(entry_point(c) for c in pod.get("spec", {}).get("containers", []))


def runner_container(pod: Pod) -> dict[str, Any]:
    """The container the runner runs (the first that is a specd entry point)."""
    for container in pod.get("spec", {}).get("containers", []):
        if entry_point(container):
            return dict(container)
    raise PodSpecError("no container runs a specd entry point")


def local_argv(container: Mapping[str, Any]) -> list[str]:
    """command + args, with a leading ``tini --`` dropped."""
    argv = [*container.get("command", []), *container.get("args", [])]
    if argv and os.path.basename(argv[0]) == "tini":
        argv = argv[1:]
        if argv and argv[0] == "--":
            argv = argv[1:]
    return [str(a) for a in argv]


# ---- $(VAR) expansion, as the kubelet does ---------------------------------------------

def expand(text: str, env: Mapping[str, str]) -> str:
    """``$(NAME)`` -> env[NAME] when defined (else left as is); ``$$`` -> ``$``."""
    def sub(match: re.Match[str]) -> str:
        if match.group(0) == "$$":
            return "$"
        name = match.group(1)
        return env.get(name, match.group(0))

    return _VAR_REF.sub(sub, text)


# ---- env: value, valueFrom, envFrom ----------------------------------------------------

_LABEL_REF = re.compile(r"^metadata\.(labels|annotations)\['(.+)'\]$")


def field_ref(pod: Pod, path: str) -> str:
    meta, spec, status = pod.get("metadata", {}), pod.get("spec", {}), pod.get("status", {})
    simple = {
        "metadata.name": meta.get("name"), "metadata.namespace": meta.get("namespace"),
        "metadata.uid": meta.get("uid"), "spec.nodeName": spec.get("nodeName"),
        "spec.serviceAccountName": spec.get("serviceAccountName", "default"),
        "status.podIP": status.get("podIP"), "status.hostIP": status.get("hostIP"),
        "status.podIPs": ",".join(i["ip"] for i in status.get("podIPs", [])),
        "status.hostIPs": ",".join(i["ip"] for i in status.get("hostIPs", [])),
    }
    if path in simple:
        return str(simple[path] or "")
    match = _LABEL_REF.match(path)
    if match:
        return str((meta.get(match.group(1)) or {}).get(match.group(2), ""))
    raise PodSpecError(f"fieldRef {path!r} is not supported by the pod runner")


def parse_quantity(value: Any) -> float:
    """A Kubernetes quantity ("500m", "2", "1Gi", "128M") as a plain number."""
    text = str(value).strip()
    binary = {"Ki": 2**10, "Mi": 2**20, "Gi": 2**30, "Ti": 2**40, "Pi": 2**50, "Ei": 2**60}
    decimal = {"n": 1e-9, "u": 1e-6, "m": 1e-3, "k": 1e3, "M": 1e6, "G": 1e9, "T": 1e12,
               "P": 1e15, "E": 1e18}
    for suffix, factor in binary.items():
        if text.endswith(suffix):
            return float(text[:-2]) * factor
    if text and text[-1] in decimal:
        return float(text[:-1]) * decimal[text[-1]]
    return float(text)


def resource_ref(container: Mapping[str, Any], ref: Mapping[str, Any]) -> str:
    """resourceFieldRef: the value divided by the divisor, rounded up (the kubelet's rule)."""
    kind, _, name = str(ref["resource"]).partition(".")
    resources = container.get("resources", {})
    value = (resources.get(kind) or {}).get(name)
    if value is None and kind == "requests":
        value = (resources.get("limits") or {}).get(name)
    if value is None:
        # unset limits read as the node's allocatable; the runner's node is this machine
        value = (os.cpu_count() or 1) if name == "cpu" else _memory_total()
    divisor = parse_quantity(ref.get("divisor") or "1")
    return str(math.ceil(parse_quantity(value) / divisor))


def _memory_total() -> int:
    try:
        for line in open("/proc/meminfo"):
            if line.startswith("MemTotal:"):
                return int(line.split()[1]) * 1024
    except OSError:
        pass
    return 0


def resolve_env(pod: Pod, container: Mapping[str, Any],
                configmaps: Mapping[str, Mapping[str, str]],
                secrets: Mapping[str, Mapping[str, str]]) -> dict[str, str]:
    """The container's environment as the kubelet computes it (envFrom first, then env in
    order, ``$(VAR)`` expanded against what came before). ``configmaps``/``secrets``: name
    -> decoded data. A missing non-optional source is a PodSpecError naming it."""
    env: dict[str, str] = {}

    def source(kind: str, ref: Mapping[str, Any], sources: Mapping[str, Mapping[str, str]],
               key: str | None) -> str | dict[str, str] | None:
        name, optional = ref.get("name", ""), bool(ref.get("optional"))
        data = sources.get(name)
        if data is None or (key is not None and key not in data):
            if optional:
                return None
            what = f"{kind} {name!r}" + (f" key {key!r}" if key is not None else "")
            raise PodSpecError(f"{what} not found")
        return dict(data) if key is None else data[key]

    for entry in container.get("envFrom", []):
        prefix = entry.get("prefix", "")
        for kind, sources in (("configMapRef", configmaps), ("secretRef", secrets)):
            if kind in entry:
                data = source(kind[:-3], entry[kind], sources, None)
                for key, val in (data or {}).items():  # type: ignore[union-attr]
                    env[prefix + key] = val
    for var in container.get("env", []):
        name = var["name"]
        if "valueFrom" not in var:
            env[name] = expand(str(var.get("value", "")), env)
            continue
        value_from = var["valueFrom"]
        value: str | None
        if "fieldRef" in value_from:
            value = field_ref(pod, value_from["fieldRef"]["fieldPath"])
        elif "resourceFieldRef" in value_from:
            value = resource_ref(container, value_from["resourceFieldRef"])
        elif "configMapKeyRef" in value_from:
            ref = value_from["configMapKeyRef"]
            value = source("configMap", ref, configmaps, ref["key"])  # type: ignore[assignment]
        elif "secretKeyRef" in value_from:
            ref = value_from["secretKeyRef"]
            value = source("secret", ref, secrets, ref["key"])  # type: ignore[assignment]
        else:
            raise PodSpecError(f"env {name}: unsupported valueFrom {sorted(value_from)}")
        if value is not None:
            env[name] = value
    return env


# ---- what a laptop needs changed --------------------------------------------------------

def container_ports(container: Mapping[str, Any]) -> list[int]:
    return [int(p["containerPort"]) for p in container.get("ports", [])]


def port_by_name(container: Mapping[str, Any], port: int | str) -> int:
    """A probe's or Service's port (number or name) as the container port number."""
    if isinstance(port, int) or str(port).isdigit():
        return int(port)
    for entry in container.get("ports", []):
        if entry.get("name") == port:
            return int(entry["containerPort"])
    raise PodSpecError(f"port {port!r} is not declared by container {container.get('name')!r}")


SQLITE_URL = "sqlite:///"


def _map_path(value: str, mounts: Mapping[str, str]) -> str:
    # a SQLite URL names a file: sqlite:////var/lib/specd/h.db lives in the /var/lib/specd mount
    if value.startswith(SQLITE_URL + "/"):
        return SQLITE_URL + _map_path(value.removeprefix(SQLITE_URL), mounts)
    # longest mount path first, so /etc/specd/policy wins over /etc
    for mount in sorted(mounts, key=len, reverse=True):
        if value == mount or value.startswith(mount.rstrip("/") + "/"):
            return mounts[mount] + value[len(mount.rstrip("/")):]
    return value


def _is_port_flag(flag: str) -> bool:
    """``--port``, ``--health-port``, ``--server.port``: a flag whose name ends in port."""
    return flag.startswith("-") and flag.lower().endswith("port")


def _map_token(token: str, mounts: Mapping[str, str], ports: Mapping[int, int],
               after_port_flag: bool) -> str:
    flag, eq, value = token.partition("=")
    if eq and flag.startswith("-"):
        return f"{flag}={_map_token(value, mounts, ports, _is_port_flag(flag))}"
    if token in WILDCARD_HOSTS:
        return LOCAL_HOST
    if after_port_flag and token.isdigit() and int(token) in ports:
        return str(ports[int(token)])
    return _map_path(token, mounts)


def localise_argv(argv: list[str], mounts: Mapping[str, str],
                  ports: Mapping[int, int]) -> list[str]:
    """Rewrite listen hosts, declared ports after ``...port`` flags and mount paths."""
    out = []
    for index, token in enumerate(argv):
        previous = argv[index - 1] if index else ""
        after_port_flag = _is_port_flag(previous)
        out.append(_map_token(token, mounts, ports, after_port_flag))
    return out


def localise_env(env: Mapping[str, str], mounts: Mapping[str, str],
                 ports: Mapping[int, int]) -> dict[str, str]:
    out = {}
    for name, value in env.items():
        if value in WILDCARD_HOSTS:
            value = LOCAL_HOST
        elif name.upper().endswith("PORT") and value.isdigit() and int(value) in ports:
            value = str(ports[int(value)])
        else:
            value = _map_path(value, mounts)
        out[name] = value
    return out


def cpu_threads(container: Mapping[str, Any]) -> int:
    """Threads the process may use: its CPU limit, else its request, in whole CPUs, >= 1."""
    resources = container.get("resources", {})
    for kind in ("limits", "requests"):
        value = (resources.get(kind) or {}).get("cpu")
        if value is not None:
            return max(1, int(parse_quantity(value)))
    return 1


def termination_grace(pod: Pod) -> float:
    meta, spec = pod.get("metadata", {}), pod.get("spec", {})
    value = meta.get("deletionGracePeriodSeconds")
    if value is None:
        value = spec.get("terminationGracePeriodSeconds", 30)
    return float(value)


def prestop_sleep(container: Mapping[str, Any]) -> float:
    """Seconds of the container's ``lifecycle.preStop.sleep`` hook (0 without one): the pod
    keeps serving that long after its deletion, while the endpoint change reaches every
    proxy, before SIGTERM. Exec and HTTP hooks are refused: this runner cannot run them."""
    hook = (container.get("lifecycle") or {}).get("preStop")
    if not hook:
        return 0.0
    other = sorted(set(hook) - {"sleep"})
    if other:
        raise PodSpecError(f"lifecycle.preStop: {other[0]} hooks are not supported by the "
                           "pod runner (sleep is)")
    return float(hook["sleep"]["seconds"])
