"""Thin process and port helpers for the local control plane: start a daemon with its own log,
recognise it again later by pid *and* start time (so a recycled pid is never signalled), stop
its whole process group, and find free loopback ports."""

from __future__ import annotations

import contextlib
import os
import signal
import socket
import subprocess
import threading
import time
from collections.abc import Callable, Hashable, Iterable, Sequence
from dataclasses import dataclass
from pathlib import Path

LOOPBACK = "127.0.0.1"


@dataclass(frozen=True)
class Started:
    """What is needed to find a started process again from another Python process."""

    name: str
    pid: int
    start_ticks: int
    log: str


def free_ports(count: int) -> list[int]:
    """``count`` distinct ports that were free on 127.0.0.1 a moment ago (held together while
    picking, so they differ from each other)."""
    sockets = []
    try:
        for _ in range(count):
            sock = socket.socket(socket.AF_INET, socket.SOCK_STREAM)
            sock.bind((LOOPBACK, 0))
            sockets.append(sock)
        return [sock.getsockname()[1] for sock in sockets]
    finally:
        for sock in sockets:
            sock.close()


class PortLeases:
    """Loopback ports handed to several holders in one process: each free when picked and held
    by no other holder until released.

    :func:`free_ports` closes its sockets before it returns, and the kernel may hand a port
    just closed to the next ``bind(0)``; two pods starting together then got the same port,
    the second process failed to bind it, and both pods' probes and Services answered from the
    first process. Thread-safe: pod workers lease from their own threads.
    """

    def __init__(self, pick: Callable[[], int] = lambda: free_ports(1)[0]) -> None:
        self._pick = pick
        self._held: dict[Hashable, set[int]] = {}
        self._lock = threading.Lock()

    def lease(self, holder: Hashable, count: int) -> list[int]:
        """``count`` ports added to ``holder``'s, none held by anyone yet."""
        with self._lock:
            taken = set().union(*self._held.values())
            picked: list[int] = []
            while len(picked) < count:
                port = self._pick()
                if port not in taken:
                    picked.append(port)
                    taken.add(port)
            self._held.setdefault(holder, set()).update(picked)
            return picked

    def hold(self, holder: Hashable, ports: Iterable[int]) -> None:
        """``holder`` holds exactly ``ports`` from now on (the ones it dropped are free again)."""
        with self._lock:
            self._held[holder] = set(ports)

    def release(self, holder: Hashable) -> None:
        with self._lock:
            self._held.pop(holder, None)


def port_is_free(port: int) -> bool:
    with socket.socket(socket.AF_INET, socket.SOCK_STREAM) as sock:
        sock.setsockopt(socket.SOL_SOCKET, socket.SO_REUSEADDR, 1)
        try:
            sock.bind((LOOPBACK, port))
        except OSError:
            return False
        return True


def _stat(pid: int) -> list[str] | None:
    try:
        raw = Path(f"/proc/{pid}/stat").read_text()
    except OSError:
        return None
    # The command name (field 2) may contain spaces; everything after the last ')' is fixed.
    return raw[raw.rindex(")") + 2:].split()


def start_ticks(pid: int) -> int:
    fields = _stat(pid)
    return int(fields[19]) if fields else -1  # field 22 of /proc/pid/stat: start time


def is_alive(pid: int, ticks: int) -> bool:
    """True while the process we started (same pid and start time) exists and is not a zombie."""
    _reap(pid)
    fields = _stat(pid)
    return bool(fields) and fields[0] != "Z" and int(fields[19]) == ticks


# Popen objects of the daemons this Python process started: kept so they are reaped through
# Popen (no zombie, no "still running" ResourceWarning when the object is collected).
_children: dict[int, subprocess.Popen[bytes]] = {}


def _reap(pid: int) -> None:
    """Collect the exit status if the process is our child, so it does not linger as a zombie."""
    child = _children.get(pid)
    if child is not None:
        if child.poll() is not None:
            del _children[pid]
        return
    with contextlib.suppress(ChildProcessError, OSError):
        os.waitpid(pid, os.WNOHANG)


def start(name: str, argv: Sequence[str], log: Path, cwd: Path,
          env: dict[str, str] | None = None) -> tuple[subprocess.Popen[bytes], Started]:
    """Start ``argv`` in its own session (it outlives the CLI that started it), output to log."""
    log.parent.mkdir(parents=True, exist_ok=True)
    with open(log, "ab") as sink:
        sink.write(f"==> {' '.join(argv)}\n".encode())
        sink.flush()
        proc = subprocess.Popen(list(argv), stdout=sink, stderr=subprocess.STDOUT,
                                stdin=subprocess.DEVNULL, cwd=cwd, env=env,
                                start_new_session=True)
    _children[proc.pid] = proc
    return proc, Started(name=name, pid=proc.pid, start_ticks=start_ticks(proc.pid), log=str(log))


def stop(process: Started, timeout: float = 10.0) -> None:
    """SIGTERM the process group, wait, then SIGKILL what is left. No-op if already gone."""
    if not is_alive(process.pid, process.start_ticks):
        return
    for sig, wait in ((signal.SIGTERM, timeout), (signal.SIGKILL, 5.0)):
        with contextlib.suppress(ProcessLookupError, PermissionError):
            os.killpg(process.pid, sig)
        deadline = time.monotonic() + wait
        while time.monotonic() < deadline:
            if not is_alive(process.pid, process.start_ticks):
                return
            time.sleep(0.05)


def log_tail(path: str | Path, lines: int = 15) -> str:
    try:
        text = Path(path).read_text(errors="replace")
    except OSError:
        return ""
    return "\n".join(text.splitlines()[-lines:])
