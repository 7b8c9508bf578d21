"""The benchmark prompt sets: the held-out set covers every task group in both languages
and shares no phrase with the training templates or the default set."""

from __future__ import annotations

import re

from specd.api.metrics import TASK_GROUPS
from specd.api.prompt_file import read_prompt_file
from specd.worker.bench.prompts import DEFAULT_PROMPTS, HELDOUT_PROMPTS, benchmark_texts

CJK = re.compile(r"[\u4e00-\u9fff]+")
WORDS = 4  # an English phrase: four words in a row ("return a json object")
CHARS = 6  # a Chinese phrase: six characters in a row
# a Latin word inside Chinese text is a template's slot ("用{lang}写一个函数"): one character,
# the same whatever fills it or however it is spaced
SLOT = "X"
LATIN_IN_CHINESE = re.compile(r"\s*[A-Za-z][A-Za-z0-9+#]*\s*")
CJK_OR_SLOT = re.compile(rf"[\u4e00-\u9fff{SLOT}]+")


def _text(row: dict) -> str:
    return " ".join(m["content"] for m in row["messages"])


def _phrases(text: str) -> set[str]:
    words = re.findall(r"[a-z0-9']+", text.lower())
    out = {" ".join(words[i: i + WORDS]) for i in range(len(words) - WORDS + 1)}
    if CJK.search(text):
        for run in CJK_OR_SLOT.findall(LATIN_IN_CHINESE.sub(SLOT, text)):
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
    assert _phrases("用 Rust 写一个函数，反转字符串。") & seen  # a template, another slot
    shared = {_text(r): _phrases(_text(r)) & seen for r in read_prompt_file(HELDOUT_PROMPTS)}
    assert {t: p for t, p in shared.items() if p} == {}


def test_training_excludes_both_benchmark_sets():
    texts = benchmark_texts()
    assert benchmark_texts(DEFAULT_PROMPTS) < texts
    assert benchmark_texts(HELDOUT_PROMPTS) < texts
