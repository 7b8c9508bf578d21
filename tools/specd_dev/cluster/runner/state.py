"""What the runner publishes in ``<state-dir>/runner/state.json``, read by the CLI and tests."""

from __future__ import annotations

import json
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specd import SpecdError
from specd_dev.cluster import processes


@dataclass(frozen=True)
class RunnerState:
    capacity: str  # the memory budget, what is reserved, the count cap if any
    pods: list[dict[str, Any]]
    services: dict[str, int]  # "ns/name/port" -> loopback port
    backends: dict[str, int]  # "ns/name/port" -> Ready pods HAProxy routes to

    def _key(self, namespace: str, service: str, port: str | None) -> str | None:
        prefix = f"{namespace}/{service}/"
        keys = [k for k in self.services if k.startswith(prefix)]
        if port is not None:
            return prefix + port if prefix + port in self.services else None
        if len(keys) == 1:
            return keys[0]
        return prefix + "http" if prefix + "http" in self.services else None

    def url(self, namespace: str, service: str, port: str | None = None) -> str | None:
        """http://127.0.0.1:<port> for a Service (its only port, or the one named)."""
        key = self._key(namespace, service, port)
        return f"http://{processes.LOOPBACK}:{self.services[key]}" if key else None

    def ready_backends(self, namespace: str, service: str, port: str | None = None) -> int:
        """How many Ready pods the Service URL routes to right now."""
        key = self._key(namespace, service, port)
        return self.backends.get(key, 0) if key else 0

    def pod(self, namespace: str, name: str) -> dict[str, Any] | None:
        return next((p for p in self.pods if p["namespace"] == namespace and p["pod"] == name),
                    None)


def read(state_dir: Path) -> RunnerState | None:
    try:
        raw = json.loads((state_dir / "runner" / "state.json").read_text())
    except (OSError, ValueError):
        return None
    return RunnerState(capacity=str(raw.get("capacity", "")), pods=list(raw.get("pods", [])),
                       services=dict(raw.get("services", {})),
                       backends=dict(raw.get("backends", {})))


def rss_bytes(pid: int | None) -> int | None:
    if not pid:
        return None
    try:
        for line in Path(f"/proc/{pid}/status").read_text().splitlines():
            if line.startswith("VmRSS:"):
                return int(line.split()[1]) * 1024
    except OSError:
        return None
    return None


def pod_log(state_dir: Path, namespace: str, name: str) -> Path:
    path = state_dir / "logs" / "pods" / f"{namespace}_{name}.log"
    if not path.exists():
        raise SpecdError(f"no log for pod {namespace}/{name} in {path.parent} "
                         "(is it a specd pod the runner started?)")
    return path


def set_max_processes(state_dir: Path, value: int | None) -> None:
    """Change the cap of a running (or next) runner; None: back to the memory default."""
    path = state_dir / "runner" / "config.json"
    path.parent.mkdir(parents=True, exist_ok=True)
    settings: dict[str, Any] = {}
    try:
        settings = json.loads(path.read_text())
    except (OSError, ValueError):
        pass
    settings["max_processes"] = value
    path.write_text(json.dumps(settings))
