"""The groups' servers: ``specd serve`` processes on 127.0.0.1, or existing endpoints.

A started server gets a free loopback port, its policy file in the output folder, and its
own log; it counts as up when ``/readyz`` says 200 (cold start = spawn to ready, reported
apart from every trace). An endpoint must answer ``/v1/models`` before any load is sent, or
the pilot is refused naming ``groups.<G>.endpoint``. Peak memory is the server process's
peak resident set (``VmHWM`` in /proc; for an endpoint only when its local ``pid`` is given).
"""

from __future__ import annotations

import json
import os
import signal
import socket
import subprocess
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path

import httpx

from specd.pilot.config import GroupSpec, PilotError, ServeSettings


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def memory(pid: int | None) -> dict[str, int] | None:
    """Resident and peak resident bytes of a local process (Linux /proc)."""
    if pid is None:
        return None
    try:
        text = Path(f"/proc/{pid}/status").read_text()
    except OSError:
        return None
    out = {}
    for line in text.splitlines():
        key, _, value = line.partition(":")
        if key in ("VmRSS", "VmHWM"):
            out["rss" if key == "VmRSS" else "peak_rss"] = int(value.split()[0]) * 1024
    return out or None


def serve_command(s: ServeSettings, port: int, policy_path: Path | None) -> list[str]:
    cmd = [sys.executable, "-m", "specd.cli", "serve", "--model", s.model, "--drafter",
           s.drafter, "--host", "127.0.0.1", "--port", str(port), "--max-slots",
           str(s.max_slots), "--max-queue", str(s.max_queue), "--max-context",
           str(s.max_context), "--device", s.device, "--dtype", s.dtype]
    if s.drafter_path:
        cmd += ["--drafter-path", s.drafter_path]
    if s.prompt_lookup:
        cmd.append("--prompt-lookup")
    if policy_path is not None:
        cmd += ["--policy-file", str(policy_path)]
    return cmd + list(s.extra_args)


@dataclass
class GroupServer:
    name: str
    url: str
    model: str = ""
    kind: str = "endpoint"  # started | endpoint
    pid: int | None = None
    command: list[str] = field(default_factory=list)
    cold_start_s: float | None = None
    log_path: str | None = None
    proc: subprocess.Popen | None = None
    idle_memory: dict[str, int] | None = None
    spawned_at: float = 0.0

    def alive(self) -> bool:
        return self.proc is None or self.proc.poll() is None

    def memory(self) -> dict[str, int] | None:
        return memory(self.pid)

    def to_json(self) -> dict:
        return {"name": self.name, "url": self.url, "model": self.model, "kind": self.kind,
                "pid": self.pid, "command": self.command, "cold_start_s": self.cold_start_s,
                "idle_memory": self.idle_memory, "memory": self.memory()}

    def stop(self, grace_s: float = 30.0) -> None:
        if self.proc is None or self.proc.poll() is not None:
            return
        self.proc.send_signal(signal.SIGTERM)
        try:
            self.proc.wait(grace_s)
        except subprocess.TimeoutExpired:
            self.proc.kill()
            self.proc.wait(10)


def _first_model(url: str, timeout: float = 5.0) -> str:
    r = httpx.get(f"{url}/v1/models", timeout=timeout)
    r.raise_for_status()
    data = r.json().get("data") or []
    if not data:
        raise PilotError("no models listed")
    return str(data[0]["id"])


def attach(name: str, spec: GroupSpec) -> GroupServer:
    assert spec.endpoint is not None
    url = spec.endpoint.rstrip("/")
    try:
        model = _first_model(url)
    except (httpx.HTTPError, OSError, ValueError, KeyError, PilotError) as exc:
        raise PilotError(f"groups.{name}.endpoint: {url} is unreachable or not an "
                         f"OpenAI-compatible server ({type(exc).__name__}: {exc}); no load "
                         "was sent") from None
    server = GroupServer(name, url, spec.model or model, "endpoint", spec.pid)
    server.idle_memory = server.memory()
    return server


def spawn(name: str, spec: GroupSpec, out_dir: Path) -> GroupServer:
    """Start the group's ``specd serve`` process (not yet ready)."""
    s = spec.serve
    assert s is not None
    port = free_port()
    policy_path = None
    if s.policy is not None:
        policy_path = out_dir / f"policy-{name}.json"
        policy_path.write_text(json.dumps(s.policy, indent=2))
    cmd = serve_command(s, port, policy_path)
    log_path = out_dir / f"server-{name}.log"
    env = dict(os.environ)
    if s.threads:
        env["OMP_NUM_THREADS"] = str(s.threads)
    with log_path.open("w") as log:
        proc = subprocess.Popen(cmd, stdout=log, stderr=subprocess.STDOUT, env=env,
                                start_new_session=True)
    server = GroupServer(name, f"http://127.0.0.1:{port}", "", "started", proc.pid, cmd, None,
                         str(log_path), proc)
    server.spawned_at = time.perf_counter()
    return server


def wait_ready(server: GroupServer, spec: GroupSpec, ready_timeout_s: float = 1800.0) -> None:
    """Until ``/readyz`` says 200; a process that exits first is refused with its log."""
    proc, url = server.proc, server.url
    assert proc is not None and server.log_path is not None
    t0 = server.spawned_at
    while True:
        if proc.poll() is not None:
            tail = Path(server.log_path).read_text(errors="replace")[-1500:]
            raise PilotError(f"groups.{server.name}.serve: the server exited with status "
                             f"{proc.returncode} before it was ready; its log ends:\n{tail}")
        try:
            if httpx.get(f"{url}/readyz", timeout=2.0).status_code == 200:
                break
        except (httpx.HTTPError, OSError):
            pass
        if time.perf_counter() - t0 > ready_timeout_s:
            server.stop(5)
            raise PilotError(f"groups.{server.name}.serve: not ready after "
                             f"{ready_timeout_s:.0f} s (log: {server.log_path})")
        time.sleep(1.0)
    server.cold_start_s = time.perf_counter() - t0
    server.model = spec.model or _first_model(url)
    server.idle_memory = server.memory()


def start(name: str, spec: GroupSpec, out_dir: Path) -> GroupServer:
    server = spawn(name, spec, out_dir)
    try:
        wait_ready(server, spec)
    except BaseException:
        server.stop(5)
        raise
    return server
