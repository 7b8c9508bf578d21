"""Prompts written by the target itself (Magpie-style), a third training prompt family.

A chat model fed only the text that opens a user turn (its chat template cut where the user's
words would start) writes a plausible user request: the requests it was aligned on, in
their own variety -- which no hand-written list matches (Xu et al. 2024, "Magpie"). The
drafters must predict the target on what users send; the template and broad families cover
the tasks the project thought of, these cover what the target expects users to ask.

Each user turn is sampled (``TEMPERATURE``) until the turn ends (turns still open after
``max_tokens`` are dropped), optionally after an opener that steers it (Chinese openers, so
both languages are in the family; task openers for code and structured requests). Kept:
complete, valid text, at least ``MIN_WORDS`` words (or Chinese characters), not seen before,
not a template, broad or benchmark prompt. Deterministic given the seed; cached as JSON next to the data sets.
"""

from __future__ import annotations

import hashlib
import json
import random
from dataclasses import asdict
from pathlib import Path
from typing import Any

import torch

from specd.worker.training.prompts import Prompt

# ids of self-written prompts start here (above the broad family's, ID_BASE = 100_000)
SELF_ID_BASE = 200_000
MIN_WORDS = 4
BATCH = 64
# (opener, language, task); "" lets the model open the turn itself. Listed once per share.
OPENERS: tuple[tuple[str, str, str], ...] = (
    *(("", "en", "chat"),) * 10,
    ("Write a Python function", "en", "code"), ("Write a SQL query", "en", "code"),
    ("Can you explain this code", "en", "code"), ("Write a short story", "en", "writing"),
    ("Write an email", "en", "writing"), ("Give me a JSON", "en", "structured"),
    ("Make a table", "en", "structured"), ("List", "en", "structured"),
    # few: this small target's Chinese user turns drift into mixed-language text
    ("请", "zh", "chat"), ("为什么", "zh", "chat"), ("用Python写", "zh", "code"),
)
TEMPERATURE = 0.9  # Magpie samples at 1; a 135M model's turns stay coherent more often at 0.9


def user_turn_prefix(tokenizer: Any) -> str:
    """The chat template's text up to where a user's message starts."""
    marker = "\x00specd-user\x00"
    text = tokenizer.apply_chat_template([{"role": "user", "content": marker}], tokenize=False)
    return text[:text.index(marker)]


def _words(text: str) -> int:
    """Words, counting each CJK character as one."""
    cjk = sum(1 for ch in text if "\u4e00" <= ch <= "\u9fff")
    return len(text.split()) + cjk


def _cache_path(root: Path, fingerprint: str, seed: int, dtype: str, max_tokens: int) -> Path:
    # no n: the first n prompts of a longer run are exactly a run for n (same batches, same
    # order), so one file serves every n up to its length
    key = json.dumps([fingerprint, seed, dtype, max_tokens, OPENERS, MIN_WORDS, BATCH,
                      TEMPERATURE])
    return root / f"self-prompts-{hashlib.sha256(key.encode()).hexdigest()[:16]}.json"


@torch.inference_mode()
def write_self_prompts(runner: Any, tokenizer: Any, n: int, seed: int,
                       exclude: set[str], max_tokens: int = 64,
                       progress: bool = True) -> list[Prompt]:
    """Sample ``n`` user requests from the target (``runner``: the engine's forward over it)."""
    from tqdm import tqdm

    from specd.worker.training.data import decode_batch_runner

    prefix_ids = tokenizer(user_turn_prefix(tokenizer), add_special_tokens=False)["input_ids"]
    end = tokenizer.eos_token_id  # the instruct template closes a turn with it
    rng = random.Random(seed + 7)
    seen = set(exclude)
    out: list[Prompt] = []
    bar = tqdm(total=n, desc="self prompts", unit="prompt", disable=not progress)
    for b in range(100 * (n // BATCH + 1)):  # bounded: a model that never closes a turn
        if len(out) >= n:
            break
        openers = [rng.choice(OPENERS) for _ in range(BATCH)]
        starts = [prefix_ids + tokenizer(o, add_special_tokens=False)["input_ids"]
                  for o, _, _ in openers]
        gen = torch.Generator().manual_seed(seed * 100003 + 90_000 + b)
        res = decode_batch_runner(runner, starts, max_tokens, end, 1, [TEMPERATURE] * BATCH, gen)
        for (opener, lang, task), start, r in zip(openers, starts, res, strict=True):
            new = [int(t) for t in r["seq"][len(start):]]
            if not new or new[-1] != end:
                continue  # still open after max_tokens
            text = (opener + tokenizer.decode(new[:-1], skip_special_tokens=True)).strip()
            if (_words(text) < MIN_WORDS or "\ufffd" in text or text in seen
                    or len(out) >= n):
                continue
            seen.add(text)
            out.append(Prompt(SELF_ID_BASE + len(out), lang, task, text))
            bar.update(1)
    bar.close()
    return out


def self_prompts(runner_of: Any, tokenizer: Any, n: int, seed: int, fingerprint: str,
                 dtype: str, root: Path, exclude: set[str], progress: bool = True,
                 max_tokens: int = 64) -> list[Prompt]:
    """``n`` self-written prompts, cached; ``runner_of()`` builds the runner only on a miss."""
    if n <= 0:
        return []
    path = _cache_path(root, fingerprint, seed, dtype, max_tokens)
    if path.is_file():
        cached = json.loads(path.read_text())
        if len(cached) >= n:
            return [Prompt(**p) for p in cached[:n]]
    prompts = write_self_prompts(runner_of(), tokenizer, n, seed, exclude, max_tokens, progress)
    root.mkdir(parents=True, exist_ok=True)
    tmp = path.with_suffix(".tmp")
    tmp.write_text(json.dumps([asdict(p) for p in prompts], ensure_ascii=False, indent=0))
    tmp.rename(path)
    return prompts
