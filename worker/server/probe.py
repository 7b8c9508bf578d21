"""``POST /specd/v1/probe``: greedy outputs with the target's own top-2 gap (lossless probes).

The operator's canary analysis sends the same prompts to one canary pod and one stable pod
and compares their outputs token by token (``operator/analysis/probes.py``). Speculative
decoding must not change greedy output; yet two correct workers may still differ where the
target's two best tokens are a numeric near-tie (another kernel, dtype or batch shape rounds
them the other way round). So each answer carries, for every output position, the target's
top-1 and top-2 tokens and their logit gap from one plain teacher-forced forward over prompt
+ output (no drafter, a cache of its own): a divergence where both sides see the two tokens
within a small gap is a near-tie; anything else is a real difference. The same numbers show
whether this worker's output is its own target's greedy choice at every position.

Probes go straight to the engine (no admission queue, no per-request metrics: they are not
traffic, and canary analysis must read traffic only), greedy, with the tokenizer's EOS; the prompt is raw text, tokenized as
``/v1/completions`` does.
"""

from __future__ import annotations

import asyncio
from typing import Any

from fastapi import FastAPI
from pydantic import BaseModel, ConfigDict, Field

from specd.worker.engine.api import GenerationRequest, SamplingParams
from specd.worker.server.errors import APIError, bad_request

PROBE_PATH = "/specd/v1/probe"
MAX_PROMPTS = 16


class ProbeRequest(BaseModel):
    model_config = ConfigDict(extra="forbid")

    prompts: list[str] = Field(min_length=1, max_length=MAX_PROMPTS)
    max_tokens: int = Field(32, ge=1, le=256)


class ProbeResult(BaseModel):
    prompt_tokens: int
    token_ids: list[int]
    tokens: list[str]  # each output token decoded alone (for messages)
    finish_reason: str
    top1: list[int]  # the target's best token at each output position
    top2: list[int]  # its second best
    gap: list[float]  # logit(top1) - logit(top2), float32 logits


class ProbeResponse(BaseModel):
    revision: str
    track: str
    drafter: str
    policy_version: str
    dtype: str
    results: list[ProbeResult]


def add_probe_route(app: FastAPI, server: Any) -> None:
    """Register the route on ``app`` (``server``: the app's ``Server``)."""

    @app.post(PROBE_PATH, response_model=ProbeResponse)
    async def probe(body: ProbeRequest) -> ProbeResponse:
        engine = server.engine
        if not engine.ready or server.admission.draining:
            raise APIError(503, "not ready (or draining): no probes now",
                           type="server_error", code="not_ready")
        score = getattr(engine, "score", None)
        if score is None:
            raise APIError(501, "this engine cannot score probes", type="server_error")
        for i, prompt in enumerate(body.prompts):
            if not prompt:
                raise bad_request(f"prompts[{i}] must not be empty", param="prompts")
        encoded = [list(server.tokenizer.encode(p)) for p in body.prompts]
        for i, ids in enumerate(encoded):
            server.token_budget(len(ids), body.max_tokens, f"prompts[{i}]", None)
        results = await asyncio.gather(*(_one(engine, server.tokenizer, ids, body.max_tokens)
                                         for ids in encoded))
        stats = engine.stats()
        return ProbeResponse(revision=server.settings.revision, track=server.settings.track,
                             drafter=stats.drafter, policy_version=stats.policy_version,
                             dtype=str(engine.runner.dtype).removeprefix("torch."),
                             results=list(results))


async def _one(engine: Any, tokenizer: Any, prompt: list[int], max_tokens: int) -> ProbeResult:
    request = GenerationRequest(prompt_token_ids=prompt, probe=True,
                                params=SamplingParams(max_tokens=max_tokens, temperature=0.0))
    output: list[int] = []
    finish = "length"
    async for event in engine.submit(request):
        output.extend(event.token_ids)
        if event.finished:
            finish = event.finish_reason or "length"
            if finish == "error":
                raise APIError(500, event.error or "generation failed", type="server_error",
                               code="engine_error")
    scored = await asyncio.to_thread(engine.score, prompt + output, len(prompt)) \
        if output else []
    return ProbeResult(prompt_tokens=len(prompt), token_ids=output,
                       tokens=[tokenizer.decode([t]) for t in output], finish_reason=finish,
                       top1=[s[0] for s in scored], top2=[s[1] for s in scored],
                       gap=[round(s[2], 6) for s in scored])
