"""Greedy fidelity: every drafter x policy gives exactly plain decoding's tokens, and
transformers generate()'s, at concurrency 1; under concurrency any divergence is a logit
near-tie."""

from __future__ import annotations

import pytest
import torch

from specd.api.policy import Policy
from specd.worker.engine.api import GenerationRequest, SamplingParams

pytestmark = pytest.mark.model

MAX_TOKENS = 24
PROMPTS = [
    # repetitive: prompt lookup and trained drafters get long acceptances
    "Repeat exactly, five times, the line: the cat sat on the mat.",
    "Write a Python function that returns the sum of a list of numbers.",
]
POLICIES = {
    "fixed": Policy(mode="fixed", k_max=4, fixed_length=4),
    "scheduled": Policy(mode="scheduled", k_max=5, max_verify=5, survival_floor=0.0),
}


@pytest.fixture(scope="module")
def prompts(chat_prompt_ids):
    return [chat_prompt_ids(p) for p in PROMPTS]


@pytest.fixture(scope="module")
def hf_reference(target, prompts):
    """transformers generate(), greedy, batch 1."""
    outs = []
    with torch.inference_mode():
        for ids in prompts:
            gen = target.model.generate(torch.tensor([ids]), max_new_tokens=MAX_TOKENS,
                                        do_sample=False, eos_token_id=target.tokenizer.eos_token_id,
                                        pad_token_id=target.tokenizer.eos_token_id)
            outs.append(gen[0, len(ids):].tolist())
    return outs


@pytest.fixture(scope="module")
def plain_outputs(make_engine, prompts):
    engine = make_engine("none", Policy(mode="plain"))
    outs = []
    for ids in prompts:
        outs.append(engine.generate([GenerationRequest(ids, SamplingParams(max_tokens=MAX_TOKENS))])[0])
    return outs


def test_plain_equals_hf_generate(plain_outputs, hf_reference):
    assert [o.token_ids for o in plain_outputs] == hf_reference
    assert all(o.spec.tau == 1.0 and o.spec.drafted == 0 for o in plain_outputs)


@pytest.mark.parametrize("drafter", ["ngram", "parallel", "semi-ar", "draft-model",
                                     "semi-ar+lookup"])
def test_speculative_greedy_is_token_identical(drafter, make_engine, prompts, hf_reference):
    name, _, lookup = drafter.partition("+")
    engine = make_engine(name, POLICIES["fixed"], prompt_lookup=bool(lookup))
    for mode in ("fixed", "scheduled"):
        engine.set_policy(POLICIES[mode])  # swapped between rounds, no restart
        accepted = 0
        for ids, ref in zip(prompts, hf_reference, strict=True):
            out = engine.generate([GenerationRequest(ids, SamplingParams(max_tokens=MAX_TOKENS))])[0]
            assert out.token_ids == ref, f"{drafter}/{mode} diverged from plain decoding"
            assert out.spec.drafted > 0 and out.spec.verified > 0
            assert out.spec.emitted == out.spec.accepted + out.spec.rounds
            accepted += out.spec.accepted
        assert engine.policy.mode == mode
        # every drafter and mode must exercise the accept path (the repetitive prompt):
        # identical tokens with every draft rejected would prove nothing about acceptance
        assert accepted > 0, f"{drafter}/{mode}: no draft was accepted"
    if lookup:  # ... and the lookup side of the combined drafter
        assert engine.drafter.lookups_used > 0
    assert engine.stats().running == 0 and engine.stats().kv_used_tokens == 0


def test_concurrent_divergence_only_at_near_ties(make_engine, chat_prompt_ids, same_or_near_tie):
    texts = ["Name three colours.", "What is 12 times 12?", "Say hello in French.",
             "Repeat exactly, five times, the line: the cat sat on the mat."]
    prompts = [chat_prompt_ids(t) for t in texts]
    params = SamplingParams(max_tokens=MAX_TOKENS)
    plain = make_engine("none", Policy(mode="plain"))
    ref = [plain.generate([GenerationRequest(ids, params)])[0].token_ids for ids in prompts]
    # two slots for four requests and 8-token prefill chunks: requests join mid-flight and
    # their prompts are prefilled in chunks inside the running batch's verify forwards
    engine = make_engine("ngram", POLICIES["scheduled"], max_slots=2, prefill_chunk=8)
    outs = engine.generate([GenerationRequest(ids, params) for ids in prompts])
    assert sum(o.spec.accepted for o in outs) > 0  # drafts were accepted under concurrency
    for ids, out, want in zip(prompts, outs, ref, strict=True):
        same_or_near_tie(ids, out.token_ids, want)
