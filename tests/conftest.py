"""Shared fixtures. The model is loaded once per test session."""

from __future__ import annotations

import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from collections.abc import Callable, Iterator
from pathlib import Path

import pytest

# Real local Kubernetes cluster and Prometheus fixtures (see that module's docstring).
pytest_plugins = ["specd_dev.cluster.pytest_plugin"]


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


@pytest.fixture(scope="module")
def postgres() -> Iterator[str]:
    """A throwaway PostgreSQL on 127.0.0.1, one per test module: its SQLAlchemy URL."""
    from specd_dev.postgres import throwaway

    with throwaway() as url:
        yield url


# checkov (PyPI) pins dozens of libraries below what the dev venv has (packaging 23.2, ...):
# it lives in its own venv, made once per machine, never in an extra.
CHECKOV_VERSION = "3.3.30"


@pytest.fixture(scope="session")
def checkov() -> Callable[..., list[dict]]:
    """``checkov(framework, *paths)``: the failed checks of a checkov scan (dicts with
    check_id, check_name, resource, file_path). Skips when PyPI is unreachable."""
    venv = Path(tempfile.gettempdir()) / f"specd-checkov-{CHECKOV_VERSION}"
    exe = venv / "bin" / "checkov"
    if not exe.exists():
        shutil.rmtree(venv, ignore_errors=True)
        subprocess.run([sys.executable, "-m", "venv", str(venv)], check=True, timeout=120)
        out = subprocess.run([str(venv / "bin" / "pip"), "install", "-q",
                              f"checkov=={CHECKOV_VERSION}"],
                             capture_output=True, text=True, timeout=900)
        if out.returncode != 0:
            shutil.rmtree(venv, ignore_errors=True)
            if re.search(r"(?i)connection|network|resolve|timed out|no matching", out.stderr):
                pytest.skip(f"checkov cannot be installed, PyPI is unreachable: "
                            f"{out.stderr.strip().splitlines()[-1]}")
            raise RuntimeError(f"pip install checkov failed: {out.stderr[-2000:]}")

    def scan(framework: str, *paths: Path) -> list[dict]:
        argv = [str(exe), "--framework", framework, "--quiet", "--compact", "-o", "json",
                "--skip-download"]
        for path in paths:
            argv += ["-d" if Path(path).is_dir() else "-f", str(path)]
        out = subprocess.run(argv, capture_output=True, text=True, timeout=600,
                             env={**os.environ, "LOG_LEVEL": "ERROR"})
        assert out.returncode in (0, 1), out.stderr[-2000:]  # 1: some check failed
        reports = json.loads(out.stdout or "[]")
        reports = reports if isinstance(reports, list) else [reports]
        assert all(r.get("summary", {}).get("parsing_errors", 0) == 0 for r in reports), \
            out.stdout[-2000:]
        return [check for r in reports for check in r.get("results", {}).get(
            "failed_checks", [])]

    return scan


@pytest.fixture(scope="session")
def helm_bin() -> Path:
    """The helm binary of the local cluster's cache (``specd cluster build``)."""
    from specd_dev.cluster import build

    helm = build.bin_dir() / "helm"
    if not helm.exists():  # `make test` builds it first; `make test-unit` may run before
        pytest.skip(f"{helm} is missing: run `make cluster-build` (specd cluster build)")
    return helm
