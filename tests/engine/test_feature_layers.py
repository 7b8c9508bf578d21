"""Semi-ar drafters that read target layers besides h_p (EAGLE-3-style fused features): the
engine hands them the residual stream of those layers at h_p's position, the same values the
training and evaluation paths read from HF, and greedy output stays token-identical to plain."""

from __future__ import annotations

import pytest
import torch

from specd.api.policy import Policy
from specd.worker.engine.api import EngineConfig, GenerationRequest, SamplingParams

pytestmark = pytest.mark.model

LAYERS = [2, 15, 26]


@pytest.fixture(scope="module")
def feature_net(target):
    """The packaged semi-ar drafter: trained, it reads these target layers."""
    from specd.worker.drafters.artifacts import load_drafter

    net = load_drafter("semi-ar", target)
    assert net.feature_layers == LAYERS
    return net


class Recording:
    """Wraps a drafter and records what the engine hands it each round."""

    def __init__(self, inner):
        self.inner = inner
        self.calls = []

    def __getattr__(self, name):
        return getattr(self.inner, name)

    def propose(self, rows, hidden, generator=None, layers=None):
        self.calls.append(([list(r.tokens) for r in rows], hidden.clone(), layers.clone()))
        return self.inner.propose(rows, hidden, generator, layers)


def test_engine_hands_the_drafter_the_target_layers(target, runner, feature_net, chat_prompt_ids,
                                                    same_or_near_tie):
    from specd.worker.engine.engine import Engine

    prompts = [chat_prompt_ids("Repeat exactly, five times, the line: the cat sat on the mat."),
               chat_prompt_ids("Name three colours.")]
    plain = Engine(target, EngineConfig(drafter="none", max_slots=4, max_context=512,
                                        cost_profile="none"), Policy(mode="plain"), runner=runner)
    refs = [plain.generate([GenerationRequest(p, SamplingParams(max_tokens=16))])[0].token_ids
            for p in prompts]
    engine = Engine(target, EngineConfig(drafter="semi-ar", max_slots=4, max_context=512,
                                         cost_profile="none"),
                    Policy(mode="fixed", k_max=4, fixed_length=4), runner=runner,
                    drafter_net=feature_net)
    assert engine.core.drafter.feature_layers == tuple(LAYERS)
    recorder = Recording(engine.core.drafter)
    engine.core.drafter = recorder
    outs = engine.generate([GenerationRequest(p, SamplingParams(max_tokens=16)) for p in prompts])
    for p, out, ref in zip(prompts, outs, refs, strict=True):
        same_or_near_tie(p, out.token_ids, ref)
        assert out.spec.drafted > 0
    # the accept path ran: identical tokens with every draft rejected would prove nothing
    assert sum(o.spec.accepted for o in outs) > 0
    assert recorder.calls
    # every round's features are the target's own at the last cached position of each row
    for tokens, hidden, layers in recorder.calls[:3] + recorder.calls[-2:]:
        for j, ids in enumerate(tokens):
            with torch.inference_mode():
                hf = target.model.model(torch.tensor([ids[:-1]]), output_hidden_states=True)
            assert torch.allclose(hidden[j], hf.last_hidden_state[0, -1], atol=2e-3, rtol=1e-3)
            for n, li in enumerate(LAYERS):
                assert torch.allclose(layers[j, n], hf.hidden_states[li + 1][0, -1],
                                      atol=2e-3, rtol=1e-3)
    # and the drafter really reads them: other layers' features change its drafts
    tokens, hidden, layers = recorder.calls[0]
    with torch.inference_mode():
        last = torch.tensor([t[-1] for t in tokens])
        a = feature_net.propose(hidden, last, 4, with_q=False, layers=layers)
        b = feature_net.propose(hidden, last, 4, with_q=False, layers=layers.flip(1))
    assert not torch.allclose(a.confidence_logit, b.confidence_logit)
    with pytest.raises(ValueError, match="reads target layers"):
        feature_net.propose(hidden, last, 4, with_q=False)


def test_feature_layers_and_context_layer_are_exclusive(target):
    from specd.worker.drafters.registry import untrained_net

    with pytest.raises(ValueError, match="either"):
        untrained_net("semi-ar", target.model, num_positions=2, context=True, feature_layers=[2])
