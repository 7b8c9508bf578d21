"""Sampling is lossless: on a tiny model with an 8-token vocabulary, the joint distribution of
the first three sampled tokens equals the exact target distribution for every drafter (chi^2
over 20,000 samples), and the same test rejects a deliberately wrong acceptance rule. Both
rules: the standard one (unseeded requests) and the coupled one (seeded requests, 20,000
different seeds, keyed noise), each with a wrong variant that must fail."""

from __future__ import annotations

import pytest
import torch

from specd.api.policy import Policy
from specd.worker.engine import verifier
from specd.worker.engine.api import EngineConfig, GenerationRequest, SamplingParams
from specd.worker.model import LoadedModel

VOCAB = 8
STEPS = 3
SAMPLES = 20_000
PROMPT = [1, 2, 3, 1, 2]
TEMPERATURE = 0.9
TOP_K = 6


@pytest.fixture(scope="module")
def tiny():
    from transformers import LlamaConfig, LlamaForCausalLM

    torch.manual_seed(1234)
    cfg = LlamaConfig(vocab_size=VOCAB, hidden_size=32, intermediate_size=64, num_hidden_layers=2,
                      num_attention_heads=4, num_key_value_heads=2, max_position_embeddings=64,
                      tie_word_embeddings=False, bos_token_id=None, eos_token_id=None,
                      pad_token_id=None)
    model = LlamaForCausalLM(cfg).eval()
    with torch.no_grad():  # varied, context-dependent distributions (not near-uniform)
        for w in model.parameters():
            if w.dim() == 2:
                w.normal_(0, 0.25)
    model.requires_grad_(False)
    return LoadedModel(source=None, model=model, tokenizer=None, device="cpu", dtype=torch.float32)


def exact_distribution(model) -> dict[tuple[int, ...], float]:
    """P(t1, t2, t3 | prompt) with temperature and top-k, by enumeration."""
    def probs(prefixes):
        with torch.inference_mode():
            logits = model(torch.tensor(prefixes)).logits[:, -1].float()
        n = logits.shape[0]
        return verifier.target_probs(logits, torch.full((n,), TEMPERATURE),
                                     torch.full((n,), TOP_K), torch.ones(n))

    dist = {(): 1.0}
    for _ in range(STEPS):
        keys = list(dist)
        p = probs([PROMPT + list(k) for k in keys])
        dist = {k + (t,): dist[k] * float(p[i, t]) for i, k in enumerate(keys) for t in range(VOCAB)}
    return dist


def perturbed_net(name: str, tiny, variant: str | None = None):
    """Untrained nets are near-identity maps; noise makes q clearly different from p.
    ``variant``: "context" (semi-ar with a context layer) or "features" (semi-ar reading
    both decoder layers of the tiny target besides h_p); "lookup" needs no change to the
    net (prompt lookup joins it in the engine)."""
    from specd.worker.drafters.registry import untrained_net

    net = untrained_net(name, tiny.model, num_positions=4, seed=7, context=variant == "context",
                        feature_layers=[0, 1] if variant == "features" else None)
    gen = torch.Generator().manual_seed(99)
    with torch.no_grad():
        for p in net.parameters():
            p.add_(torch.randn(p.shape, generator=gen) * 0.1)
    return net


def sample_counts(tiny, drafter: str, policy: Policy, wrong_rule=None,
                  variant: str | None = None, seeded: bool = False) -> dict:
    """``seeded``: request i carries seed i (the coupled rule; ``wrong_rule`` then replaces
    ``verify_coupled``), else no seed (the standard rule; ``wrong_rule``: ``verify_sampling``)."""
    from specd.worker.engine.engine import Engine

    net = (perturbed_net(drafter, tiny, variant) if drafter in ("parallel", "semi-ar", "draft-model")
           else None)
    cfg = EngineConfig(drafter=drafter, max_slots=500, max_context=16, cost_profile="none", seed=5,
                       prompt_lookup=variant == "lookup")
    engine = Engine(tiny, cfg, policy, drafter_net=net)
    if wrong_rule is not None and seeded:
        engine.core.verify_coupled = wrong_rule
    elif wrong_rule is not None:
        engine.core.verify_sampling = wrong_rule
    if variant == "lookup":  # lookups look good wherever they match (this tiny model would
        # soon learn they are poor): both proposers' drafts then reach the verifier
        engine.drafter.stats.prior, engine.drafter.stats.prior_weight = 0.9, 1e9
    # one token more than measured, so the first round drafts two positions
    params = [SamplingParams(max_tokens=STEPS + 1, temperature=TEMPERATURE, top_k=TOP_K,
                             seed=i if seeded else None) for i in range(SAMPLES)]
    outs = engine.generate([GenerationRequest(list(PROMPT), params[i]) for i in range(SAMPLES)])
    counts: dict[tuple[int, ...], int] = {}
    accepted = 0
    for o in outs:
        assert len(o.token_ids) == STEPS + 1
        key = tuple(o.token_ids[:STEPS])
        counts[key] = counts.get(key, 0) + 1
        accepted += o.spec.accepted
    return {"counts": counts, "accepted": accepted,
            "lookups": getattr(engine.drafter, "lookups_used", 0)}


def chi2_pvalue(counts: dict, dist: dict) -> float:
    """Pearson chi^2 with cells of expected count < 5 pooled; p-value via the gamma tail."""
    stat, df = 0.0, -1
    pool_obs, pool_exp = 0.0, 0.0
    for key, prob in dist.items():
        exp = prob * SAMPLES
        obs = counts.get(key, 0)
        if exp < 5:
            pool_obs += obs
            pool_exp += exp
            continue
        stat += (obs - exp) ** 2 / exp
        df += 1
    if pool_exp > 0:
        stat += (pool_obs - pool_exp) ** 2 / pool_exp
        df += 1
    return float(torch.special.gammaincc(torch.tensor(df / 2, dtype=torch.float64),
                                         torch.tensor(stat / 2, dtype=torch.float64)))


@pytest.fixture(scope="module")
def exact(tiny):
    dist = exact_distribution(tiny.model)
    assert abs(sum(dist.values()) - 1) < 1e-5
    return dist


POLICY = Policy(mode="scheduled", k_max=3, fixed_length=2, max_verify=3, survival_floor=0.0)


VARIANTS = [
    ("none", Policy(mode="plain"), None),
    ("ngram", POLICY, None),
    ("parallel", Policy(mode="fixed", k_max=3, fixed_length=2), None),
    ("semi-ar", POLICY, None),
    ("semi-ar", POLICY, "context"),  # the context layer (its own KV cache, fed hidden states)
    ("semi-ar", POLICY, "features"),  # fused target-layer features besides h_p
    ("draft-model", POLICY, None),
    ("semi-ar", POLICY, "lookup"),  # prompt lookup beside it (the prompt repeats [1, 2])
]


@pytest.mark.slow
@pytest.mark.parametrize("seeded", [False, True], ids=["standard", "coupled"])
@pytest.mark.parametrize("drafter,policy,variant", VARIANTS)
def test_sampling_matches_target_distribution(tiny, exact, drafter, policy, variant, seeded):
    res = sample_counts(tiny, drafter, policy, variant=variant, seeded=seeded)
    if drafter != "none":
        assert res["accepted"] > SAMPLES // 10  # the accept path is really exercised
    if variant == "lookup":
        assert res["lookups"] > SAMPLES // 10, res["lookups"]
    pvalue = chi2_pvalue(res["counts"], exact)
    assert pvalue > 1e-4, f"{drafter}: output distribution differs from the target's (p={pvalue:.2e})"


def wrong_resample_from_p(p, q, draft, lengths, u_accept, u_sample):
    """The classic bug: after a rejection, resample from p instead of norm(max(0, p - q))."""
    accepted, _ = verifier.verify_sampling(p, q, draft, lengths, u_accept, u_sample)
    rows = torch.arange(p.shape[0])
    return accepted, verifier._sample_rows(p[rows, accepted], u_sample)


@pytest.mark.slow
def test_wrong_acceptance_rule_is_rejected(tiny, exact):
    res = sample_counts(tiny, "semi-ar", POLICY, wrong_rule=wrong_resample_from_p)
    pvalue = chi2_pvalue(res["counts"], exact)
    assert pvalue < 1e-6, f"a wrong rule went unnoticed (p={pvalue:.2e})"


def wrong_fresh_correction(p, seeds, positions, draft, lengths):
    """The coupled rule's classic bug: at a mismatch, emit a fresh sample from p instead of
    the keyed sample (the one the draft was compared with). Each token is still "from p",
    but the choice now favours tokens the draft proposes."""
    accepted, nxt = verifier.verify_coupled(p, seeds, positions, draft, lengths)
    rows = torch.arange(p.shape[0])
    fresh = torch.multinomial(p[rows, accepted], 1, generator=_FRESH).squeeze(1)
    return accepted, torch.where(accepted < lengths, fresh, nxt)


_FRESH = torch.Generator().manual_seed(3)


@pytest.mark.slow
def test_wrong_coupled_rule_is_rejected(tiny, exact):
    res = sample_counts(tiny, "semi-ar", POLICY, wrong_rule=wrong_fresh_correction, seeded=True)
    pvalue = chi2_pvalue(res["counts"], exact)
    assert pvalue < 1e-6, f"a wrong coupled rule went unnoticed (p={pvalue:.2e})"


@pytest.mark.slow
def test_coupled_outputs_are_a_function_of_the_seed(tiny):
    """The same seeds give the same outputs with another drafter, another policy and a
    different batch (here: all 200 at once against 7 slots, in reverse order)."""
    from specd.worker.engine.engine import Engine

    def run(drafter, policy, slots, order):
        net = perturbed_net(drafter, tiny) if drafter == "semi-ar" else None
        cfg = EngineConfig(drafter=drafter, max_slots=slots, max_context=16,
                           cost_profile="none", seed=slots)
        engine = Engine(tiny, cfg, policy, drafter_net=net)
        reqs = [GenerationRequest(list(PROMPT), SamplingParams(
            max_tokens=6, temperature=TEMPERATURE, top_k=TOP_K, seed=i)) for i in order]
        return {i: o.token_ids for i, o in zip(order, engine.generate(reqs), strict=True)}

    seeds = list(range(200))
    plain = run("none", Policy(mode="plain"), 200, seeds)
    assert run("semi-ar", POLICY, 7, seeds[::-1]) == plain
    assert run("ngram", Policy(mode="fixed", k_max=3, fixed_length=3), 50, seeds) == plain
    assert len({tuple(v) for v in plain.values()}) > 100  # seeds really vary the output
