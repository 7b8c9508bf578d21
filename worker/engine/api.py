"""The engine's in-process API: what the HTTP server and the benchmark call.

Usage (asyncio; the engine runs its rounds on one background thread)::

    from specd.worker.engine import Engine, EngineConfig, GenerationRequest, SamplingParams

    engine = Engine.from_model("smollm2-135m", EngineConfig(drafter="semi-ar"), policy=Policy(),
                               registry=prometheus_client.CollectorRegistry())  # or Engine(loaded, ...)
    await engine.start()                     # measures the step-cost table, starts the round thread
    assert engine.ready                      # model + drafter loaded, cost profile measured
    req = GenerationRequest(prompt_token_ids=ids, params=SamplingParams(max_tokens=64),
                            task_group="chat")
    async for event in engine.submit(req):   # one StreamEvent per round that commits tokens
        print(event.text, end="")            # text delta (stop strings already cut)
        if event.finished:
            print(event.finish_reason, event.spec.tau)
    engine.cancel(req.request_id)            # frees the request's KV slot at once
    engine.set_policy(new_policy)            # takes effect at the next round, no restart
    engine.stats()                           # EngineStats: queue depth, running, KV usage
    await engine.stop(drain=True)            # graceful: finish running requests first

Synchronous use (tests, the benchmark): ``engine.generate([req, ...])`` runs the rounds on
the calling thread until all given requests finish and returns one ``RequestOutput`` each.

Everything in this module is plain data (no torch), so the server can import it cheaply.
"""

from __future__ import annotations

import uuid
from dataclasses import dataclass, field
from typing import Literal

from specd import SpecdError

FinishReason = Literal["stop", "length", "cancelled", "error"]
DRAFTERS = ("none", "ngram", "parallel", "semi-ar", "draft-model")
TRAINED_DRAFTERS = ("parallel", "semi-ar", "draft-model")  # the ones prompt lookup can join


class EngineError(SpecdError):
    """A request the engine cannot serve (bad parameters, prompt too long, engine stopped)."""


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens. ``temperature == 0`` is greedy (top_p/top_k ignored)."""

    max_tokens: int = 128
    temperature: float = 0.0
    top_p: float = 1.0
    top_k: int = 0  # 0: no top-k cut
    # sampling keyed by (seed, output position): the output is a function of seed and prompt
    # alone (the coupled rule, verifier.verify_coupled); None: the engine's RNG, standard rule
    seed: int | None = None
    stop: tuple[str, ...] = ()  # stop strings; the text is cut before the match
    eos_token_ids: tuple[int, ...] | None = None  # None: the tokenizer's EOS
    ignore_eos: bool = False

    def __post_init__(self) -> None:
        if self.max_tokens < 1:
            raise EngineError(f"max_tokens must be >= 1, got {self.max_tokens}")
        if self.temperature < 0:
            raise EngineError(f"temperature must be >= 0, got {self.temperature}")
        if not 0.0 < self.top_p <= 1.0:
            raise EngineError(f"top_p must be in (0, 1], got {self.top_p}")
        if self.top_k < 0:
            raise EngineError(f"top_k must be >= 0, got {self.top_k}")
        if isinstance(self.stop, str):  # a lone string is a common slip: accept it
            object.__setattr__(self, "stop", (self.stop,))
        if any(not s for s in self.stop):
            raise EngineError("stop strings must be non-empty")

    @property
    def greedy(self) -> bool:
        return self.temperature == 0.0


@dataclass
class GenerationRequest:
    """One generation. ``prompt_token_ids`` is already tokenized (chat template applied)."""

    prompt_token_ids: list[int]
    params: SamplingParams = field(default_factory=SamplingParams)
    task_group: str | None = None  # folded into api.metrics.TASK_GROUPS
    request_id: str = field(default_factory=lambda: uuid.uuid4().hex)
    # a lossless probe (the operator's, /specd/v1/probe): served like any request but left
    # out of the per-request metrics (requests, latency, TTFT, TPOT, acceptance length), so
    # canary analysis reads traffic only
    probe: bool = False

    def __post_init__(self) -> None:
        if not self.prompt_token_ids:
            raise EngineError("prompt_token_ids must not be empty")


@dataclass
class SpecStats:
    """Per-request speculative accounting, cumulative over the request's rounds."""

    rounds: int = 0  # decode rounds (each commits >= 1 token)
    drafted: int = 0
    verified: int = 0
    accepted: int = 0
    emitted: int = 0  # tokens committed by decode rounds (= accepted + rounds, before stop cuts)

    @property
    def truncated(self) -> int:
        return self.drafted - self.verified

    @property
    def tau(self) -> float:
        """Mean acceptance length: tokens committed per round (accepted + 1)."""
        return (self.accepted + self.rounds) / self.rounds if self.rounds else 0.0

    def as_dict(self) -> dict[str, float]:
        return {"rounds": self.rounds, "drafted": self.drafted, "verified": self.verified,
                "accepted": self.accepted, "truncated": self.truncated,
                "emitted": self.emitted, "tau": self.tau}


@dataclass
class StreamEvent:
    """Tokens committed for one request in one round (or the final event)."""

    request_id: str
    token_ids: list[int]  # new token ids (never includes tokens after a stop)
    text: str  # new text (incremental detokenization; stop string and after removed)
    finished: bool = False
    finish_reason: FinishReason | None = None
    spec: SpecStats = field(default_factory=SpecStats)  # snapshot, cumulative
    prompt_tokens: int = 0
    completion_tokens: int = 0  # cumulative
    error: str | None = None  # set when finish_reason == "error"


@dataclass
class RequestOutput:
    """The whole result of one request (``Engine.generate``)."""

    request_id: str
    prompt_token_ids: list[int]
    token_ids: list[int]
    text: str
    finish_reason: FinishReason
    spec: SpecStats
    first_token_s: float = 0.0  # seconds from submit to first token
    latency_s: float = 0.0


@dataclass(frozen=True)
class EngineStats:
    queue_depth: int  # submitted, not yet holding a KV slot
    running: int  # holding a KV slot (prefilling or decoding)
    kv_used_tokens: int
    kv_capacity_tokens: int
    rounds: int
    drafter: str
    policy_mode: str
    policy_version: str
    ready: bool

    @property
    def kv_usage(self) -> float:
        return self.kv_used_tokens / self.kv_capacity_tokens if self.kv_capacity_tokens else 0.0


@dataclass
class EngineConfig:
    """Engine arguments that do not change between rounds (the policy does)."""

    drafter: str = "semi-ar"  # one of DRAFTERS
    drafter_path: str | None = None  # trained artifact; None: the packaged/default one
    # prompt lookup beside the trained drafter, per request and round the better proposal
    # (``drafters/lookup_hybrid.py``); the drafter is then named "<drafter>+lookup"
    prompt_lookup: bool = False
    max_slots: int = 32  # KV slots = most requests running at once
    max_context: int = 2048  # tokens per slot (prompt + output + draft margin)
    prefill_chunk: int = 256  # prompt tokens per round per newcomer (chunked prefill)
    cost_profile: Literal["measure", "none"] = "measure"  # "none": cost = token count
    seed: int = 0
    # intra-op CPU threads of the round thread (0: every CPU the process may use); see
    # ``threads`` for why the main thread of a serving process stays serial
    threads: int = 0

    def __post_init__(self) -> None:
        if self.drafter not in DRAFTERS:
            raise EngineError(f"unknown drafter {self.drafter!r}: use one of {', '.join(DRAFTERS)}")
        if self.prompt_lookup and self.drafter not in TRAINED_DRAFTERS:
            raise EngineError(f"prompt_lookup joins a trained drafter ({', '.join(TRAINED_DRAFTERS)}),"
                              f" not {self.drafter!r}")
        if self.max_slots < 1 or self.max_context < 16 or self.prefill_chunk < 1:
            raise EngineError("max_slots >= 1, max_context >= 16 and prefill_chunk >= 1 required")
        if self.threads < 0:
            raise EngineError("threads must be >= 0 (0: every available CPU)")
