"""One image per process (worker/, operator/, dashboard/ Dockerfiles). There is no Docker
engine here, so the images are checked by reading them: checkov's Dockerfile checks (PyPI)
find nothing, and each image installs only its own extra, runs as a numeric non-root uid
under tini, and (operator, dashboard) never installs torch."""

from __future__ import annotations

import re
from pathlib import Path

import pytest

ROOT = Path(__file__).resolve().parents[1]
IMAGES = {"worker": "worker", "operator": "operator", "dashboard": "dashboard"}
# checkov findings accepted on purpose, with the reason (none today)
ACCEPTED: dict[str, str] = {}


def dockerfile(process: str) -> str:
    return (ROOT / process / "Dockerfile").read_text()


@pytest.mark.slow
def test_checkov_finds_nothing_in_the_dockerfiles(checkov) -> None:
    failed = checkov("dockerfile", *(ROOT / p / "Dockerfile" for p in IMAGES))
    remaining = [f"{f['check_id']} {f['file_path']}: {f['check_name']}" for f in failed
                 if f["check_id"] not in ACCEPTED]
    assert not remaining, "\n".join(remaining)


@pytest.mark.parametrize("process", IMAGES)
def test_image_installs_only_its_extra_and_runs_non_root(process: str) -> None:
    text = dockerfile(process)
    installs = re.findall(r"pip install (\S+)", text)
    assert f"'.[{IMAGES[process]}]'" in installs or (process == "worker" and "." in installs)
    assert not any("[dev]" in i for i in installs)
    user = re.findall(r"^USER (\S+)", text, re.M)
    assert user and re.fullmatch(r"[1-9][0-9]*:[1-9][0-9]*", user[-1]), user
    entry = re.search(r"^ENTRYPOINT (.+)$", text, re.M).group(1)
    assert entry.startswith('["/usr/bin/tini", "--", "specd"'), entry


@pytest.mark.parametrize("process", ["operator", "dashboard"])
def test_operator_and_dashboard_images_have_no_torch_and_write_only_tmp(process: str) -> None:
    text = dockerfile(process)
    code = "\n".join(line for line in text.splitlines() if not line.startswith("#"))
    assert "torch" not in code.replace("find_spec('torch')", "")
    assert "FROM python:3.11-slim" in text
    assert "ENV PYTHONDONTWRITEBYTECODE=1" in text and "HOME=/tmp" in text
    # the build stage checks that the extra's resolution brought no torch
    assert "find_spec('torch')" in text


def test_build_context_is_the_package_sources_only() -> None:
    """.dockerignore is an allowlist: what the Dockerfiles COPY is in it; tests, docs, the
    chart and the local tooling outside the package are not."""
    allowed = {line[1:].rstrip("/") for line in (ROOT / ".dockerignore").read_text()
               .splitlines() if line.startswith("!")}
    assert "*" in (ROOT / ".dockerignore").read_text().splitlines()
    for process in IMAGES:
        for sources in re.findall(r"^COPY (?!--from)(.+) \S+$", dockerfile(process), re.M):
            assert all(s in allowed or s == "." for s in sources.split()), (process, sources)
    assert not allowed & {"tests", "docs", "helm", "examples", ".venv", "deploy"}
