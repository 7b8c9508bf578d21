"""Pod status from a local process, shaped as the kubelet reports it (pure)."""

from __future__ import annotations

import hashlib
from dataclasses import dataclass
from typing import Any

HOST_IP = "127.0.0.1"
# The runner's fake pod network: addresses are labels for EndpointSlices and Prometheus;
# traffic goes to each process's loopback port (the runner keeps the mapping).
POD_NETWORK = "10.245"


def pod_ip(uid: str) -> str:
    digest = hashlib.sha256(uid.encode()).digest()
    return f"{POD_NETWORK}.{digest[0]}.{1 + digest[1] % 254}"


@dataclass
class Terminated:
    exit_code: int
    reason: str  # Completed | Error
    started_at: str
    finished_at: str
    signal: int | None = None


@dataclass
class ContainerState:
    """What the runner knows of its one container; the pod status is a function of it."""

    name: str
    image: str
    waiting_reason: str | None = "ContainerCreating"
    waiting_message: str | None = None
    running_since: str | None = None
    restart_count: int = 0
    last_terminated: Terminated | None = None
    terminated: Terminated | None = None  # final (restartPolicy Never/OnFailure done)
    started: bool = False  # startup probe passed (or none)
    ready: bool = False
    pid: int | None = None


def _terminated(t: Terminated) -> dict[str, Any]:
    out: dict[str, Any] = {"exitCode": t.exit_code, "reason": t.reason,
                           "startedAt": t.started_at, "finishedAt": t.finished_at}
    if t.signal is not None:
        out["signal"] = t.signal
    return out


def container_status(state: ContainerState) -> dict[str, Any]:
    current: dict[str, Any]
    if state.terminated is not None:
        current = {"terminated": _terminated(state.terminated)}
    elif state.running_since is not None:
        current = {"running": {"startedAt": state.running_since}}
    else:
        waiting: dict[str, Any] = {"reason": state.waiting_reason or "ContainerCreating"}
        if state.waiting_message:
            waiting["message"] = state.waiting_message
        current = {"waiting": waiting}
    out: dict[str, Any] = {
        "name": state.name, "image": state.image, "imageID": "",
        "ready": state.ready, "started": state.started, "restartCount": state.restart_count,
        "state": current, "lastState": {},
    }
    if state.pid is not None:
        out["containerID"] = f"specd-runner://{state.pid}"
    if state.last_terminated is not None:
        out["lastState"] = {"terminated": _terminated(state.last_terminated)}
    return out


def _condition(kind: str, ok: bool, now: str, previous: dict[str, dict[str, Any]],
               reason: str | None = None, message: str | None = None) -> dict[str, Any]:
    status = "True" if ok else "False"
    old = previous.get(kind)
    since = old["lastTransitionTime"] if old and old.get("status") == status else now
    condition: dict[str, Any] = {"type": kind, "status": status, "lastTransitionTime": since,
                                 "lastProbeTime": None}
    if reason:
        condition["reason"] = reason
    if message:
        condition["message"] = message
    return condition


def pod_status(pod: dict[str, Any], state: ContainerState, started_at: str,
               now: str) -> dict[str, Any]:
    """The status the runner writes (a whole-object merge patch of ``.status``)."""
    old = pod.get("status", {})
    previous = {c["type"]: c for c in old.get("conditions", [])}
    if state.terminated is not None:
        phase = "Succeeded" if state.terminated.exit_code == 0 else "Failed"
    elif state.running_since is not None or state.restart_count > 0:
        phase = "Running"
    else:
        phase = "Pending"
    reason = message = None
    if not state.ready:
        reason = "ContainersNotReady"
        message = f"containers with unready status: [{state.name}]"
        if state.waiting_reason and state.running_since is None:
            reason, message = state.waiting_reason, state.waiting_message or message
    conditions = [
        previous.get("PodScheduled") or _condition("PodScheduled", True, now, previous),
        _condition("Initialized", True, now, previous),
        _condition("ContainersReady", state.ready, now, previous, reason, message),
        _condition("Ready", state.ready, now, previous, reason, message),
    ]
    ip = pod_ip(pod["metadata"]["uid"])
    return {
        "phase": phase, "conditions": conditions,
        "hostIP": HOST_IP, "hostIPs": [{"ip": HOST_IP}],
        "podIP": ip, "podIPs": [{"ip": ip}],
        "startTime": old.get("startTime") or started_at,
        "containerStatuses": [container_status(state)],
    }


def comparable(status: dict[str, Any]) -> dict[str, Any]:
    """The status without its timestamps (to skip patches that would change nothing else)."""
    out = {k: v for k, v in status.items() if k != "startTime"}
    out["conditions"] = [{k: v for k, v in c.items() if k != "lastTransitionTime"}
                         for c in status.get("conditions", [])]
    return out
