"""Benchmark prompt files: JSONL, one object per line.

Each line is either ``{"messages": [...chat messages...]}`` (the chat template is applied)
or ``{"prompt": "plain text"}``; an optional ``"task_group"`` names its group (chat, code,
structured, long-form; others fold into ``other``).
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from specd import SpecdError
from specd.api.metrics import task_group
from specd.api.prompt_file import read_prompt_file  # also re-exported for the callers

DEFAULT_PROMPTS = Path(__file__).with_name("prompts.jsonl")
# written apart from the training templates and the default set (shares no phrase with
# either, ``tests/test_bench_prompts.py``): traffic the drafters were never tuned on
HELDOUT_PROMPTS = Path(__file__).with_name("prompts_heldout.jsonl")
_CJK = re.compile(r"[\u4e00-\u9fff]")


@dataclass(frozen=True)
class BenchPrompt:
    token_ids: list[int]
    task_group: str
    text: str


def spread_sample(rows: list[dict[str, Any]], n: int) -> list[dict[str, Any]]:
    """``n`` rows in file order, each task group and language (Chinese or not) holding its
    share of the file (largest remainders; ties to the stratum met first): a short run that
    stands for the whole set, where the first ``n`` rows of a file sorted by group would be
    one or two groups."""
    if n >= len(rows):
        return list(rows)
    strata: dict[tuple[str, bool], list[int]] = {}
    for i, row in enumerate(rows):
        text = " ".join(m["content"] for m in row.get("messages", [])) or row.get("prompt", "")
        strata.setdefault((task_group(row.get("task_group")), bool(_CJK.search(text))),
                          []).append(i)
    shares = {key: n * len(idx) / len(rows) for key, idx in strata.items()}
    take = {key: int(share) for key, share in shares.items()}
    by_remainder = sorted(strata, key=lambda key: -(shares[key] - take[key]))  # stable
    for key in by_remainder[: n - sum(take.values())]:
        take[key] += 1
    return [rows[i] for i in sorted(i for key, idx in strata.items() for i in idx[: take[key]])]


def select_rows(rows: list[dict[str, Any]], limit: int = 0,
                sample: int = 0) -> tuple[list[dict[str, Any]], str]:
    """The benchmark's ``--limit N`` (the first N) or ``--sample N`` (``spread_sample``),
    and how they were chosen, for the run's record."""
    if limit and sample:
        raise SpecdError("--limit and --sample each choose the prompts: give one")
    if min(limit, sample) < 0:
        raise SpecdError("--limit and --sample must be >= 0")
    if sample:
        return spread_sample(rows, sample), f"spread sample of {sample} of {len(rows)}"
    if limit:
        return rows[:limit], f"first {limit} of {len(rows)}"
    return list(rows), f"all {len(rows)}"


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
