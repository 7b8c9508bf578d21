"""Engine test fixtures: one shared runner over the session's target model."""

from __future__ import annotations

import pytest

from specd.worker.engine.api import EngineConfig


@pytest.fixture(scope="session")
def runner(target):
    from specd.worker.engine.llama import LlamaRunner

    return LlamaRunner(target.model)


def drafter_path(name: str, target) -> str:
    """The committed trained artifact when there is one, else randomly initialised nets:
    the fidelity tests hold for any drafter, trained or not."""
    if name in ("none", "ngram"):
        return None
    from specd.worker.drafters.artifacts import DrafterArtifactError, resolve_artifact

    try:
        resolve_artifact(name, target)
        return None
    except DrafterArtifactError:
        return "untrained"


@pytest.fixture(scope="session")
def make_engine(target, runner):
    from specd.worker.engine.engine import Engine

    def make(drafter: str, policy=None, registry=None, max_slots: int = 4, costs=None, **kw):
        cfg = EngineConfig(drafter=drafter, drafter_path=drafter_path(drafter, target),
                           max_slots=max_slots, max_context=kw.pop("max_context", 512),
                           cost_profile="none", threads=kw.pop("threads", 1), **kw)
        return Engine(target, cfg, policy, registry=registry, runner=runner, costs=costs)

    return make


@pytest.fixture(autouse=True)
def _one_torch_thread():
    """The test machine's 2 cores are shared with other jobs: torch's intra-op threads then
    spin against each other (measured 6x slower on the tiny model). Restored afterwards."""
    import torch

    before = torch.get_num_threads()
    torch.set_num_threads(1)
    yield
    torch.set_num_threads(before)


@pytest.fixture(scope="session")
def same_or_near_tie(target):
    """``check(prompt, got, want)``: see ``assert_same_or_near_tie``."""
    return lambda prompt, got, want: assert_same_or_near_tie(target, prompt, got, want)


def assert_same_or_near_tie(target, prompt: list[int], got: list[int], want: list[int],
                            tolerance: float = 1e-3) -> None:
    """Batched runs may differ from a batch-1 run only where the target's top-2 logits tie
    (float sums in another order): find the first divergence and check its top-2 gap is
    under ``tolerance`` (float32's rounding by default; bfloat16 rounds ~65,000x coarser)."""
    from specd.worker.bench.engine_bench import first_divergence, top2_gap

    if got == want:
        return
    i = first_divergence(got, want)
    gap = top2_gap(target.model, prompt + want[:i])
    assert gap < tolerance, f"divergence at token {i} with a top-2 logit gap of {gap}: a real bug"


@pytest.fixture(scope="session")
def run_checking_packed_slots(make_engine, same_or_near_tie, chat_prompt_ids):
    """``run(engine)``: five requests of 4-30 tokens through a 3-slot engine, so requests end
    out of slot order and newcomers take their place; generate (greedy, exact lengths) while
    checking that
    before every round the running requests hold slots 0..n-1 of the target's cache, and
    every time the drafter drafts its own cache holds its rows on 0..m-1, no more rows than
    running requests; that both caches moved rows into the gaps finished requests left; and
    that every output is plain decoding's."""
    from specd.api.policy import Policy
    from specd.worker.engine.api import GenerationRequest, SamplingParams

    texts = ["Name three colours.", "Count from one to twenty.", "Say hello in French.",
             "Write a haiku about rain.", "What is 12 times 12?"]
    lengths = (4, 30, 9, 20, 12)

    def run(engine) -> None:
        prompts = [chat_prompt_ids(t) for t in texts]
        core = engine.core
        drafted = core.drafter.cache
        moved: dict[str, list[dict[int, int]]] = {"target": [], "drafter": []}
        for name, cache in (("target", core.cache), ("drafter", drafted)):
            def compact(name=name, compact=cache.compact):
                moves = compact()
                moved[name].append(moves)
                return moves
            cache.compact = compact
        plan = core._plan

        def planned():
            slots = sorted(s.slot for s in core.running)
            assert slots == list(range(len(slots)))
            return plan()

        propose = core.drafter.propose
        proposals = []

        def proposed(*args, **kwargs):
            out = propose(*args, **kwargs)
            held = sorted(core.drafter.slot.values())
            assert held == list(range(len(held))) and len(held) <= len(core.running)
            proposals.append(len(held))
            return out

        core._plan, core.drafter.propose = planned, proposed
        requests = [GenerationRequest(p, SamplingParams(max_tokens=n, ignore_eos=True))
                    for p, n in zip(prompts, lengths, strict=True)]
        got = engine.generate(requests)
        want = make_engine("none", Policy(mode="plain")).generate(requests)
        for request, out, plain in zip(requests, got, want, strict=True):
            same_or_near_tie(request.prompt_token_ids, out.token_ids, plain.token_ids)
            assert len(out.token_ids) == request.params.max_tokens
            assert out.spec.drafted > 0
        # requests finished below running ones: both caches moved rows down into the gaps
        assert any(moved["target"]) and any(moved["drafter"]) and max(proposals) > 1
        assert drafted.free_slots == drafted.slots  # every request's drafter slot released

    return run
