"""Lossless probes' I/O edge: find one Ready pod per track and ask it ``POST /specd/v1/probe``.

A pod is reached at ``http://<status.podIP>:<its http container port>``, as anything inside
the cluster reaches it. Where the operator runs outside the pod network (the local
development cluster, whose pod IPs are not routable), ``--pod-address-map FILE`` names a JSON
object translating ``"podIP:port"`` to a reachable ``"host:port"``; it is re-read when it
changes. A pod that cannot be reached, or refuses, is an Error (never a failure of the
canary); no Ready pod on a track is Inconclusive.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Sequence
from pathlib import Path
from typing import Any

import httpx

from specd.api.spec import ProbeSpec
from specd.operator.analysis import probes
from specd.operator.analysis.judge import Result
from specd.operator.manifests import HTTP_PORT

log = logging.getLogger(__name__)
PROBE_PATH = "/specd/v1/probe"


class ProbeError(Exception):
    """A pod could not answer a probe (its message says why)."""


class AddressMap:
    """``podIP:port`` -> ``host:port`` from a JSON file (re-read when its mtime changes)."""

    def __init__(self, path: str | Path | None) -> None:
        self.path = Path(path) if path else None
        self._mtime: float | None = None
        self._map: dict[str, str] = {}

    def resolve(self, ip: str, port: int) -> str:
        key = f"{ip}:{port}"
        if self.path is None:
            return key
        try:
            mtime = self.path.stat().st_mtime
            if mtime != self._mtime:
                self._map = {str(k): str(v) for k, v in json.loads(self.path.read_text()).items()}
                self._mtime = mtime
        except (OSError, ValueError) as exc:
            log.warning("pod address map %s unreadable: %s", self.path, exc)
        return self._map.get(key, key)


def _ready(pod: dict[str, Any]) -> bool:
    if pod.get("metadata", {}).get("deletionTimestamp"):
        return False
    status = pod.get("status") or {}
    return bool(status.get("podIP")) and any(
        c.get("type") == "Ready" and c.get("status") == "True"
        for c in status.get("conditions") or [])


def _port(pod: dict[str, Any]) -> int:
    for container in pod.get("spec", {}).get("containers", []):
        for port in container.get("ports") or []:
            if port.get("name") == "http":
                return int(port["containerPort"])
    return HTTP_PORT


class ProbeClient:
    """Sends a service's probes to one Ready pod of each track."""

    def __init__(self, kube: Any, addresses: AddressMap | None = None,
                 timeout_s: float = 120.0) -> None:
        self.kube, self.addresses = kube, addresses or AddressMap(None)
        self.timeout_s = timeout_s

    def url(self, namespace: str, service: str, track: str) -> tuple[str, str] | None:
        """(pod name, base URL) of the first Ready pod of ``track`` by name, or None."""
        pods = sorted((p for p in self.kube.list_pods(namespace, service, track) if _ready(p)),
                      key=lambda p: p["metadata"]["name"])
        if not pods:
            return None
        pod = pods[0]
        address = self.addresses.resolve(pod["status"]["podIP"], _port(pod))
        return pod["metadata"]["name"], f"http://{address}"

    def ask(self, base: str, prompts: Sequence[str], max_tokens: int) -> list[probes.ProbeAnswer]:
        try:
            response = httpx.post(base + PROBE_PATH, timeout=self.timeout_s,
                                  json={"prompts": list(prompts), "max_tokens": max_tokens})
        except httpx.HTTPError as exc:
            raise ProbeError(f"{type(exc).__name__}: {exc}") from exc
        if response.status_code != 200:
            raise ProbeError(f"HTTP {response.status_code}: {response.text[:300]}")
        try:
            return [probes.ProbeAnswer.from_json(r) for r in response.json()["results"]]
        except (KeyError, TypeError, ValueError) as exc:
            raise ProbeError(f"unexpected probe answer: {exc}") from exc

    def run(self, spec: ProbeSpec, namespace: str, service: str) -> Result:
        """Probe one canary and one stable pod -> the probes' Result for this analysis run."""
        def result(verdict: str, message: str) -> Result:
            return Result(probes.NAME, probes.METRIC, None, verdict,  # type: ignore[arg-type]
                          f"{probes.NAME}: {message}")

        answers: dict[str, list[probes.ProbeAnswer]] = {}
        pods: dict[str, str] = {}
        for track in ("canary", "stable"):
            try:
                found = self.url(namespace, service, track)
            except Exception as exc:  # noqa: BLE001 - the API's failure is an Error
                return result("Error", f"listing the {track} pods: {exc}")
            if found is None:
                return result("Inconclusive", f"no Ready {track} pod to probe")
            pods[track] = found[0]
            try:
                answers[track] = self.ask(found[1], spec.prompts, spec.max_tokens)
            except ProbeError as exc:
                return result("Error", f"{track} pod {found[0]} ({found[1]}): {exc}")
        return probes.judge(answers["stable"], answers["canary"], spec.near_tie_gap,
                            where=f" (canary {pods['canary']} vs stable {pods['stable']})")

