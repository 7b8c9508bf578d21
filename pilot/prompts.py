"""Real prompts per task group: the engine benchmark's prompt set by default.

``worker/bench/prompts.jsonl`` holds 12 prompts per task group (chat, code, structured,
long-form), English and Chinese, written as tasks a service would see; never random tokens
(random tokens overstate speculative gains: a drafter cannot guess them, a plain baseline
does not care, and the acceptance pattern of real text is what the decision rests on).
"""

from __future__ import annotations

import importlib.util
import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specd import SpecdError
from specd.api.prompt_file import read_prompt_file
from specd.pilot.config import Pilot, PilotError

_CJK = re.compile(r"[\u3400-\u9fff\uf900-\ufaff]")


def default_prompt_file() -> Path:
    spec = importlib.util.find_spec("specd.worker.bench")
    if spec is None or not spec.submodule_search_locations:
        raise PilotError("task_groups: no prompt file given and the packaged benchmark "
                         "prompts (specd.worker.bench) are not installed")
    return Path(next(iter(spec.submodule_search_locations))) / "prompts.jsonl"


@dataclass(frozen=True)
class Prompt:
    task_group: str
    messages: list[dict[str, str]]
    lang: str  # "zh" when the text holds CJK characters, else "en"

    @property
    def text(self) -> str:
        return "\n".join(m["content"] for m in self.messages)

    def approx_tokens(self) -> int:
        """A tokenizer-free size for matching trace input lengths (CJK ~1 token a char)."""
        t = self.text
        cjk = len(_CJK.findall(t))
        return max(1, cjk + (len(t) - cjk) // 4)

    def chatml(self) -> str:
        """The ChatML rendering (SmolLM2's template family) for the raw-text probe."""
        parts = [f"<|im_start|>{m['role']}\n{m['content']}<|im_end|>\n" for m in self.messages]
        return "".join(parts) + "<|im_start|>assistant\n"


def _rows(path: Path, where: str) -> list[dict[str, Any]]:
    try:
        return read_prompt_file(path)
    except SpecdError as exc:
        raise PilotError(f"{where}: {exc}") from None


def load_prompts(pilot: Pilot) -> dict[str, list[Prompt]]:
    """Task group name -> its prompts, in file order; a group with none is refused."""
    out: dict[str, list[Prompt]] = {}
    for name, tg in pilot.task_groups.items():
        where = f"task_groups.{name}.prompts"
        path = pilot.path(tg.prompts) if tg.prompts else default_prompt_file()
        select = tg.select or name
        prompts = []
        for row in _rows(path, where):
            if row.get("task_group", "other") != select:
                continue
            messages = row.get("messages") or [{"role": "user", "content": str(row["prompt"])}]
            text = "".join(m.get("content", "") for m in messages)
            prompts.append(Prompt(name, [{"role": m["role"], "content": m["content"]}
                                         for m in messages],
                                  "zh" if _CJK.search(text) else "en"))
        if not prompts:
            raise PilotError(f"{where}: no prompts with task_group '{select}' in {path}")
        out[name] = prompts
    return out
