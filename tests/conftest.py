"""Shared fixtures. The model is loaded once per test session."""

from __future__ import annotations

import os
import shutil
import subprocess
import tempfile
from collections.abc import Iterator
from pathlib import Path

import pytest

# Real local Kubernetes cluster and Prometheus fixtures (see that module's docstring).
pytest_plugins = ["specd.cluster.pytest_plugin"]


@pytest.fixture(scope="session")
def target():
    """The embedded SmolLM2-135M-Instruct, loaded once (CPU float32 here)."""
    from specd.worker.model import load_model

    return load_model("smollm2-135m")


@pytest.fixture(scope="session")
def chat_prompt_ids(target):
    def encode(text: str) -> list[int]:
        ids = target.tokenizer.apply_chat_template(
            [{"role": "user", "content": text}], add_generation_prompt=True, tokenize=True
        )
        if not isinstance(ids, list):
            ids = ids["input_ids"]
        return list(ids)

    return encode


def _pg_bin() -> Path:
    found = sorted(Path("/usr/lib/postgresql").glob("*/bin/initdb"))
    if not found:
        raise RuntimeError("PostgreSQL binaries not found: install Debian's 'postgresql' "
                           "package (make apt)")
    return found[-1].parent


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    """A throwaway PostgreSQL on 127.0.0.1 (as the postgres user when run as root), one per
    test module: its SQLAlchemy URL."""
    from specd.cluster import processes

    bin_dir, port = _pg_bin(), processes.free_ports(1)[0]
    # its own directory: pytest's are private to the user running the tests
    root = Path(tempfile.mkdtemp(prefix="specd-pg-"))
    data = root / "data"
    data.mkdir()
    as_user: list[str] = []
    if os.geteuid() == 0:  # PostgreSQL refuses to run as root
        for path in (root, data):
            shutil.chown(path, "postgres", "postgres")
        as_user = ["runuser", "-u", "postgres", "--"]

    def pg(*argv: str) -> None:
        subprocess.run([*as_user, *argv], check=True, capture_output=True, timeout=120)

    pg(str(bin_dir / "initdb"), "-D", str(data), "--auth=trust", "-U", "postgres")
    pg(str(bin_dir / "pg_ctl"), "-D", str(data), "-l", str(data / "log"), "-w", "-o",
       f"-h 127.0.0.1 -p {port} -k {data}", "start")
    try:
        yield f"postgresql+psycopg://postgres@127.0.0.1:{port}/postgres"
    finally:
        pg(str(bin_dir / "pg_ctl"), "-D", str(data), "-m", "immediate", "-w", "stop")
        shutil.rmtree(root, ignore_errors=True)
