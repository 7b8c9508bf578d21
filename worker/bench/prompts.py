"""Benchmark prompt files: JSONL, one object per line.

Each line is either ``{"messages": [...chat messages...]}`` (the chat template is applied)
or ``{"prompt": "plain text"}``; an optional ``"task_group"`` names its group (chat, code,
structured, long-form; others fold into ``other``).
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specd.api.metrics import task_group
from specd.api.prompt_file import read_prompt_file  # also re-exported for the callers

DEFAULT_PROMPTS = Path(__file__).with_name("prompts.jsonl")
# written apart from the training templates and the default set (shares no phrase with
# either, ``tests/test_bench_prompts.py``): traffic the drafters were never tuned on
HELDOUT_PROMPTS = Path(__file__).with_name("prompts_heldout.jsonl")


@dataclass(frozen=True)
class BenchPrompt:
    token_ids: list[int]
    task_group: str
    text: str


def encode_prompts(rows: list[dict[str, Any]], tokenizer: Any) -> list[BenchPrompt]:
    prompts = []
    for row in rows:
        if "messages" in row:
            text = tokenizer.apply_chat_template(row["messages"], add_generation_prompt=True,
                                                 tokenize=False)
            ids = tokenizer(text, add_special_tokens=False)["input_ids"]
        else:
            text = row["prompt"]
            ids = tokenizer(text)["input_ids"]
        prompts.append(BenchPrompt(list(ids), task_group(row.get("task_group")), text))
    return prompts


def benchmark_texts(*paths: str | Path) -> set[str]:
    """Every message text of the prompt files (default: both benchmark sets): what training
    prompt families must never contain, so the benchmarks stay held out."""
    return {m["content"] for path in paths or (DEFAULT_PROMPTS, HELDOUT_PROMPTS)
            for row in read_prompt_file(path) for m in row.get("messages", [])}
