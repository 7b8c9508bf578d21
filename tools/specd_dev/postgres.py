"""A throwaway PostgreSQL on 127.0.0.1 from Debian's binaries (``make apt``), for tests and
the demo: ``with throwaway() as url: ...`` yields its SQLAlchemy URL and removes it after.

Run as root, the server runs as the ``postgres`` user (PostgreSQL refuses root)."""

from __future__ import annotations

import contextlib
import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path


def bin_dir() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        raise RuntimeError("PostgreSQL binaries not found: install Debian's 'postgresql' "
                           "package (make apt)")
    return found[-1].parent


@contextlib.contextmanager
def throwaway() -> Iterator[str]:
    from specd_dev.cluster import processes

    binaries, port = bin_dir(), processes.free_ports(1)[0]
    # its own directory: pytest's temporary folders are private to the user running them
    root = Path(tempfile.mkdtemp(prefix="specd-pg-"))
    data = root / "data"
    data.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:
        for path in (root, data):
            shutil.chown(path, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]

    def pg(*argv: str) -> None:
        subprocess.run([*as_user, *argv], check=True, capture_output=True, timeout=120)

    pg(str(binaries / "initdb"), "-D", str(data), "--auth=trust", "-U", "postgres")
    pg(str(binaries / "pg_ctl"), "-D", str(data), "-l", str(data / "log"), "-w", "-o",
       f"-h 127.0.0.1 -p {port} -k {data}", "start")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        pg(str(binaries / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)
