"""The benchmark prompt sets: the held-out set covers every task group in both languages
and shares no phrase with the training templates or the default set; a short run's prompts
are chosen to stand for the whole file."""

from __future__ import annotations

import re

import pytest

from specd import SpecdError
from specd.api.metrics import TASK_GROUPS
from specd.api.prompt_file import read_prompt_file
from specd.worker.bench.prompts import (
    DEFAULT_PROMPTS,
    HELDOUT_PROMPTS,
    benchmark_texts,
    select_rows,
    spread_sample,
)

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


def _stratum(row: dict) -> tuple[str, bool]:
    return row["task_group"], bool(CJK.search(_text(row)))


def test_a_spread_sample_holds_every_group_and_language_in_proportion():
    for path in (DEFAULT_PROMPTS, HELDOUT_PROMPTS):
        rows = read_prompt_file(path)
        sample = spread_sample(rows, 16)
        assert len(sample) == 16
        at = [rows.index(r) for r in sample]
        assert at == sorted(at)  # file order, no repeats
        assert {r["task_group"] for r in sample} == {r["task_group"] for r in rows}
        for key in {_stratum(r) for r in rows}:
            share = 16 * sum(_stratum(r) == key for r in rows) / len(rows)
            taken = sum(_stratum(r) == key for r in sample)
            assert int(share) <= taken <= int(share) + 1, key
    # the first 16 of either file are one or two groups: what the sample is for
    assert len({r["task_group"] for r in read_prompt_file(HELDOUT_PROMPTS)[:16]}) <= 2


def test_prompts_are_chosen_by_limit_or_sample_not_both():
    rows = read_prompt_file(HELDOUT_PROMPTS)
    assert select_rows(rows) == (rows, "all 64")
    assert select_rows(rows, limit=5) == (rows[:5], "first 5 of 64")
    assert select_rows(rows, sample=8)[1] == "spread sample of 8 of 64"
    assert select_rows(rows, sample=100)[0] == rows
    with pytest.raises(SpecdError, match="give one"):
        select_rows(rows, limit=4, sample=4)
    with pytest.raises(SpecdError, match=">= 0"):
        select_rows(rows, sample=-1)
