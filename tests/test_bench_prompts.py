"""The benchmark prompt sets: the held-out set covers every task group in both languages
and shares no phrase with the training templates or the default set."""

from __future__ import annotations

import re

from specd.api.metrics import TASK_GROUPS
from specd.api.prompt_file import read_prompt_file
from specd.worker.bench.prompts import DEFAULT_PROMPTS, HELDOUT_PROMPTS, benchmark_texts

CJK = re.compile(r"[\u4e00-\u9fff]+")
WORDS = 5  # an English phrase: five words in a row
CHARS = 6  # a Chinese phrase: six characters in a row


def _text(row: dict) -> str:
    return " ".join(m["content"] for m in row["messages"])


def _phrases(text: str) -> set[str]:
    words = re.findall(r"[a-z0-9']+", text.lower())
    out = {" ".join(words[i: i + WORDS]) for i in range(len(words) - WORDS + 1)}
    for run in CJK.findall(text):
        out |= {run[i: i + CHARS] for i in range(len(run) - CHARS + 1)}
    return out


def test_heldout_set_covers_every_task_group_in_english_and_chinese():
    rows = read_prompt_file(HELDOUT_PROMPTS)
    assert len(rows) >= 64
    assert len({_text(r) for r in rows}) == len(rows)
    for group in TASK_GROUPS:
        texts = [_text(r) for r in rows if r["task_group"] == group]
        chinese = [t for t in texts if CJK.search(t)]
        assert chinese and len(chinese) < len(texts), group  # both languages


def test_heldout_set_shares_no_phrase_with_training_or_the_default_set():
    from specd.worker.training.broad_prompts import build_broad_prompts
    from specd.worker.training.prompts import build_prompts

    seen: set[str] = set()
    for text in [p.text for p in (*build_prompts(0), *build_broad_prompts(0))]:
        seen |= _phrases(text)
    for row in read_prompt_file(DEFAULT_PROMPTS):
        seen |= _phrases(_text(row))
    assert _phrases("write a python function that reverses a string") & seen  # it can fail
    shared = {_text(r): _phrases(_text(r)) & seen for r in read_prompt_file(HELDOUT_PROMPTS)}
    assert {t: p for t, p in shared.items() if p} == {}


def test_training_excludes_both_benchmark_sets():
    texts = benchmark_texts()
    assert benchmark_texts(DEFAULT_PROMPTS) < texts
    assert benchmark_texts(HELDOUT_PROMPTS) < texts
