"""Seeded sampling reproduces whatever the load, the drafter or the schedule: for every
drafter x verification policy a seeded request's tokens at concurrency 1, at concurrency 16
beside random other traffic, and with plain decoding are the same -- differences only where
the target's two best keyed scores nearly tie (float sums in another order, as for greedy)."""

from __future__ import annotations

import random

import pytest

from specd.api.policy import Policy
from specd.worker.engine.api import GenerationRequest, SamplingParams

pytestmark = [pytest.mark.model, pytest.mark.slow]

MAX_TOKENS = 24
PROMPTS = [
    "Repeat exactly, five times, the line: the cat sat on the mat.",
    "Write a short poem about the sea.",
]
# temperature 1.0 plain; 0.7 with a top-k cut (target_probs processes p before the race)
PARAMS = [SamplingParams(max_tokens=MAX_TOKENS, temperature=1.0, seed=11),
          SamplingParams(max_tokens=MAX_TOKENS, temperature=0.7, top_k=40, seed=2**40 + 12)]
POLICIES = {
    "fixed": Policy(mode="fixed", k_max=4, fixed_length=4),
    "scheduled": Policy(mode="scheduled", k_max=5, max_verify=5, survival_floor=0.0),
}
DRAFTERS = ["ngram", "parallel", "semi-ar", "draft-model", "semi-ar+lookup"]


@pytest.fixture(scope="module")
def prompts(chat_prompt_ids):
    return [chat_prompt_ids(p) for p in PROMPTS]


@pytest.fixture(scope="module")
def plain(make_engine, prompts):
    """Plain decoding, one request at a time: the reference."""
    engine = make_engine("none", Policy(mode="plain"))
    return [engine.generate([GenerationRequest(ids, p)])[0].token_ids
            for ids, p in zip(prompts, PARAMS, strict=True)]


@pytest.fixture(scope="module")
def same_or_keyed_tie(target):
    from specd.worker.bench.engine_bench import first_divergence, keyed_top2_gap

    def check(prompt, params, got, want, where, tolerance=1e-3):
        if got == want:
            return 0
        i = first_divergence(got, want)
        gap = keyed_top2_gap(target.model, prompt + want[:i], params, i)
        assert gap < tolerance, (f"{where}: seeded output diverged at token {i} with a keyed "
                                 f"top-2 gap of {gap}: a real bug")
        return 1

    return check


def traffic(rng: random.Random, prompts, n: int) -> list[GenerationRequest]:
    """Other requests: greedy, unseeded and seeded sampling, varied lengths."""
    out = []
    for _ in range(n):
        temperature = rng.choice([0.0, 0.7, 1.0])
        out.append(GenerationRequest(rng.choice(prompts), SamplingParams(
            max_tokens=rng.randint(3, 40), temperature=temperature,
            seed=rng.choice([None, rng.randrange(1000)]), top_p=rng.choice([1.0, 0.9]))))
    return out


@pytest.mark.parametrize("drafter", DRAFTERS)
def test_seeded_output_is_the_same_alone_under_load_and_plain(drafter, make_engine, prompts,
                                                              plain, same_or_keyed_tie,
                                                              chat_prompt_ids):
    name, _, lookup = drafter.partition("+")
    engine = make_engine(name, POLICIES["fixed"], max_slots=16, prefill_chunk=8,
                         prompt_lookup=bool(lookup))
    rng = random.Random(drafter)
    others = [chat_prompt_ids(t) for t in ("Name three colours.", "What is 12 times 12?")]
    ties = accepted = 0
    for mode, policy in POLICIES.items():
        engine.set_policy(policy)
        for ids, params, want in zip(prompts, PARAMS, plain, strict=True):
            out = engine.generate([GenerationRequest(ids, params)])[0]  # concurrency 1
            ties += same_or_keyed_tie(ids, params, out.token_ids, want, f"{drafter}/{mode} c=1")
            assert out.spec.drafted > 0
            accepted += out.spec.accepted
        # concurrency 16: the seeded requests among 14 others, joining mid-flight
        reqs = traffic(rng, prompts + others, 14)
        reqs[3:3] = [GenerationRequest(prompts[0], PARAMS[0])]
        reqs[11:11] = [GenerationRequest(prompts[1], PARAMS[1])]
        outs = engine.generate(reqs)
        for j, ids, params, want in zip((3, 11), prompts, PARAMS, plain, strict=True):
            ties += same_or_keyed_tie(ids, params, outs[j].token_ids, want,
                                      f"{drafter}/{mode} c=16")
    assert accepted > 0  # coupled drafts were accepted
    assert ties <= 1, f"{ties} near-tie divergences"
    assert engine.stats().running == 0 and engine.stats().kv_used_tokens == 0


def test_seeded_output_survives_a_policy_change_every_round(make_engine, prompts, plain,
                                                            same_or_keyed_tie):
    """The schedule changes under the request (plain, fixed, scheduled in turn, each round)."""
    engine = make_engine("semi-ar", POLICIES["fixed"], max_slots=4)
    core = engine.core
    cycle = [Policy(mode="plain"), POLICIES["fixed"], POLICIES["scheduled"],
             Policy(mode="fixed", k_max=2, fixed_length=1)]
    got: dict[int, list[int]] = {0: [], 1: []}
    done: set[int] = set()
    for j, (ids, params) in enumerate(zip(prompts, PARAMS, strict=True)):
        def sink(ev, j=j):
            got[j].extend(ev.token_ids)
            if ev.finished:
                done.add(j)
        core.add(GenerationRequest(ids, params), sink)
    rounds = 0
    while len(done) < 2:
        core.set_policy(cycle[rounds % len(cycle)])
        assert core.step()
        rounds += 1
    for j in (0, 1):
        same_or_keyed_tie(prompts[j], PARAMS[j], got[j], plain[j], "policy change")
