"""The bfloat16 path (the dtype CUDA serves in) run on this CPU: the trained drafters load
for a bfloat16 target (the fingerprint names the checkpoint, not the serving dtype) and
speculative greedy decoding commits plain bfloat16 decoding's tokens."""

from __future__ import annotations

import pytest
import torch

from specd.api.policy import Policy
from specd.worker.engine.api import EngineConfig, GenerationRequest, SamplingParams

from .conftest import assert_same_or_near_tie

pytestmark = pytest.mark.model

MAX_TOKENS = 24
# bfloat16 keeps 8 significant bits: logits of ~20 round by ~0.1, and a verify forward of
# several rows sums in another order than a one-row step
BF16_TIE = 0.5
PROMPTS = ["Repeat exactly, five times, the line: the cat sat on the mat.",
           "Write a Python function that returns the sum of a list of numbers."]


@pytest.fixture(scope="module")
def target_bf16():
    from specd.worker.model import load_model

    return load_model("smollm2-135m", "cpu", "bfloat16")


def test_fingerprint_names_the_checkpoint_not_the_dtype(target, target_bf16):
    from specd.worker.drafters.artifacts import load_drafter
    from specd.worker.model import model_fingerprint, weights_fingerprint

    assert next(target_bf16.model.parameters()).dtype == torch.bfloat16
    assert model_fingerprint(target_bf16) == model_fingerprint(target)
    # the weights as served are not the checkpoint's: fingerprinted directly they differ
    assert weights_fingerprint(target_bf16.model) != model_fingerprint(target)
    for method in ("parallel", "semi-ar", "draft-model"):  # trained against the fp32 target
        assert load_drafter(method, target_bf16).method == method


@pytest.mark.parametrize("drafter", ["semi-ar", "parallel", "draft-model"])
def test_bf16_speculative_greedy_matches_plain(drafter, target_bf16, chat_prompt_ids):
    from specd.worker.engine.engine import Engine
    from specd.worker.engine.llama import LlamaRunner

    runner = LlamaRunner(target_bf16.model)

    def engine(name: str, policy: Policy) -> Engine:
        cfg = EngineConfig(drafter=name, max_slots=2, max_context=512, cost_profile="none",
                           threads=1)
        return Engine(target_bf16, cfg, policy, runner=runner)

    plain = engine("none", Policy(mode="plain"))
    spec = engine(drafter, Policy(mode="fixed", k_max=4, fixed_length=4))
    accepted = 0
    for text in PROMPTS:
        ids = chat_prompt_ids(text)
        want = plain.generate([GenerationRequest(ids, SamplingParams(max_tokens=MAX_TOKENS))])[0]
        got = spec.generate([GenerationRequest(ids, SamplingParams(max_tokens=MAX_TOKENS))])[0]
        assert_same_or_near_tie(target_bf16, ids, got.token_ids, want.token_ids, BF16_TIE)
        assert got.spec.emitted == got.spec.accepted + got.spec.rounds
        accepted += got.spec.accepted
    # the trained drafter, fed bfloat16 hidden states, still drafts what the target says
    assert accepted >= MAX_TOKENS // 2
