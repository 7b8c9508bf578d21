"""POST /specd/v1/probe over real HTTP, in front of the real engine (SmolLM2-135M).

The probe's outputs are the engine's greedy outputs (semi-ar drafter, scheduled
verification: the speculative path), and its top-1 at every position is the target's own
greedy choice from a plain teacher-forced forward; the gaps are real logit gaps (checked
against the Hugging Face model); bad input gets a 4xx naming the field.
"""

from __future__ import annotations

import httpx
import pytest
import torch
from prometheus_client import CollectorRegistry

from specd.api.policy import Policy
from specd.worker.server.background import BackgroundServers

pytestmark = [pytest.mark.model, pytest.mark.slow, pytest.mark.timeout(600)]

PROMPTS = ["The capital of France is", "def add(a, b):\n    return",
           "Name three colours:", "1, 2, 3, 4,"]


@pytest.fixture(scope="module")
def probe_url(target):
    from specd.worker.engine import Engine, EngineConfig
    from specd.worker.server.app import ServerSettings, create_app

    registry = CollectorRegistry()
    engine = Engine(target, EngineConfig(drafter="semi-ar", max_slots=4, max_context=512,
                                         cost_profile="none"),
                    policy=Policy(mode="scheduled", k_max=3, fixed_length=3, max_verify=3),
                    registry=registry)
    app = create_app(engine, target.tokenizer,
                     ServerSettings(model_name="smollm2-135m", max_context=448,
                                    manage_engine=False, revision="r-probe", track="canary"),
                     CollectorRegistry())
    background = BackgroundServers({"main": app}, engines=[engine])
    yield background.url("main"), registry
    background.stop()


def test_probe_answers_greedy_tokens_with_the_targets_top2(probe_url, target) -> None:
    probe_url, registry = probe_url
    response = httpx.post(f"{probe_url}/specd/v1/probe",
                          json={"prompts": PROMPTS, "max_tokens": 12}, timeout=300)
    assert response.status_code == 200, response.text
    body = response.json()
    assert (body["revision"], body["track"], body["dtype"]) == ("r-probe", "canary", "float32")
    assert body["drafter"] == "semi-ar"
    assert len(body["results"]) == len(PROMPTS)
    tokenizer = target.tokenizer
    for prompt, result in zip(PROMPTS, body["results"], strict=True):
        n = len(result["token_ids"])
        assert n >= 1
        assert len(result["top1"]) == len(result["top2"]) == len(result["gap"]) == n
        assert result["prompt_tokens"] == len(tokenizer.encode(prompt))
        # lossless: the speculative output is the target's own greedy choice everywhere
        # (a near-tie, where the gap is tiny, may round either way between kernels)
        for token, top1, gap in zip(result["token_ids"], result["top1"], result["gap"],
                                    strict=True):
            assert token == top1 or gap < 1e-3, (prompt, result)
        assert all(g >= 0 for g in result["gap"])
        assert all(a != b for a, b in zip(result["top1"], result["top2"], strict=True))
        assert result["tokens"] == [tokenizer.decode([t]) for t in result["token_ids"]]
        # the gaps are the target's: the Hugging Face model's logits over prompt + output
        ids = tokenizer.encode(prompt) + result["token_ids"]
        with torch.inference_mode():
            logits = target.model(torch.tensor([ids])).logits[0].float()
        top = torch.topk(logits[result["prompt_tokens"] - 1:len(ids) - 1], 2, dim=-1)
        hf_gap = (top.values[:, 0] - top.values[:, 1]).tolist()
        assert result["top1"] == top.indices[:, 0].tolist()
        assert max(abs(a - b) for a, b in zip(hf_gap, result["gap"], strict=True)) < 1e-2
    # probes are not traffic: the engine ran rounds for them, but no request, latency or
    # TPOT sample exists for canary analysis to read
    assert total(registry, "specd_rounds", "_total") > 0
    for family in ("specd_requests", "specd_request_latency_seconds",
                   "specd_time_per_output_token_seconds", "specd_time_to_first_token_seconds"):
        assert total(registry, family, ("_total", "_count")) == 0, family


def total(registry, family: str, suffix) -> float:
    return sum(s.value for m in registry.collect() if m.name == family for s in m.samples
               if s.name.endswith(suffix))


@pytest.mark.parametrize(("body", "status", "field"), [
    ({"prompts": []}, 422, "prompts"),
    ({"prompts": ["x"] * 17}, 422, "prompts"),
    ({"prompts": ["hi"], "max_tokens": 0}, 422, "max_tokens"),
    ({"prompts": ["hi"], "temperature": 1.0}, 422, "temperature"),
    ({"prompts": [""]}, 400, "prompts"),
    ({"prompts": ["hi"], "max_tokens": 256, "unused": 1}, 422, "unused"),
])
def test_bad_probe_requests_name_the_field(probe_url, body, status, field) -> None:
    response = httpx.post(f"{probe_url[0]}/specd/v1/probe", json=body, timeout=60)
    assert response.status_code == status, response.text
    assert field in response.text
