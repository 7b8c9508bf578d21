"""Data settings, importable without torch (the CLI reads its defaults at parse time)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class DataSettings:
    seed: int = 0
    # defaults = the committed smollm2-135m artifacts' data set (hash ce997877fea15ecf)
    n_train: int = 768
    n_calib: int = 48
    n_test: int = 32
    max_new_tokens: int = 128
    max_prompt_tokens: int = 384
    sampled_fraction: float = 0.15  # share of train prompts continued by sampling, not greedy
    sample_temperature: float = 0.8
    # extra sampled continuations per train prompt, on top of its main one (more data per prompt)
    extra_sampled: int = 0
    # prompts from the broad family (broad_prompts.py: chat, writing, ...) added to train
    extra_prompts: int = 0
    # prompts the target writes itself (self_prompts.py, Magpie-style) added to train
    self_prompts: int = 0
    topk: int = 8
    batch_size: int = 32
    dtype: str = "bfloat16"  # the target's dtype while generating (bf16 is ~2x on AVX512 CPUs)
