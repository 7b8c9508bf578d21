"""Prompt files (JSONL), read by the engine benchmark, the training evaluation and the pilot.

Each line is either ``{"messages": [...chat messages...]}`` or ``{"prompt": "plain text"}``;
an optional ``"task_group"`` names its group (``specd.api.metrics.TASK_GROUPS``).
"""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

from specd import SpecdError


def read_prompt_file(path: str | Path) -> list[dict[str, Any]]:
    """The rows of a prompt file; a missing file, a bad line or no rows is a SpecdError
    naming the file and line."""
    path = Path(path)
    if not path.is_file():
        raise SpecdError(f"prompt file not found: {path}")
    rows: list[dict[str, Any]] = []
    for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), start=1):
        if not line.strip():
            continue
        try:
            row = json.loads(line)
        except json.JSONDecodeError as exc:
            raise SpecdError(f"{path}:{number}: not JSON ({exc.msg})") from exc
        if not isinstance(row, dict) or not ("messages" in row or "prompt" in row):
            raise SpecdError(f"{path}:{number}: expected an object with 'messages' or 'prompt'")
        rows.append(row)
    if not rows:
        raise SpecdError(f"prompt file {path} has no prompts")
    return rows
