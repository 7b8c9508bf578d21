"""The specd engine: draft -> schedule -> verify -> commit over a continuously batched set of
requests.

Modules (one job each):
- ``api``        in-process types (SamplingParams, GenerationRequest, StreamEvent, ...); no torch
- ``engine``     the facade: async submit/stream, cancel, set_policy, stats, start/stop, generate
- ``core``       one round over the running batch, as its phases: plan (admission, chunked
                 prefill), draft, schedule, verify, commit (stops), end
- ``draft_gate`` pure: does a scheduled round draft at all (prediction, measured outcomes,
                 probes with a stated bound)
- ``round_stats`` what a round did (RoundStats: phases, parts, per group and position counts)
- ``exporter``   RoundStats -> the Prometheus series, in one place
- ``llama``      batched ragged Llama forward over the HF weights, final-norm hidden states
- ``kv_cache``   slot-based preallocated KV cache; rollback = lowering a slot's length
- ``scheduler``  pure: survival, B* = argmax (N + sum top-B S) / (cost(T + B) + O), O the
                 round's drafting time; bounds, modes
- ``verifier``   pure: greedy prefix match, speculative sampling (standard rule), the coupled
                 rule for seeded requests, target distribution processing
- ``keyed``      keyed noise E(seed, output position, token): seeded sampling's randomness
- ``cost``       start-up step-cost profiling (target forward time vs batched tokens)
- ``metrics``    prometheus_client metrics named per ``specd.api.metrics``
- ``quick_bench`` plain vs speculative tokens/s side by side (smoke benchmark)
Drafters (runtime proposers) live in ``specd.worker.drafters``: ``base`` (interface),
``ngram``, ``heads`` (parallel, semi-ar), ``draft_model``, ``lookup_hybrid`` (prompt lookup
beside a trained drafter), ``registry``.
"""

from specd.worker.engine.api import (
    DRAFTERS,
    EngineConfig,
    EngineError,
    EngineStats,
    GenerationRequest,
    RequestOutput,
    SamplingParams,
    SpecStats,
    StreamEvent,
)

__all__ = ["DRAFTERS", "Engine", "EngineConfig", "EngineError", "EngineStats",
           "GenerationRequest", "RequestOutput", "SamplingParams", "SpecStats", "StreamEvent"]


def __getattr__(name: str):  # lazy: importing the API types must not import torch
    if name == "Engine":
        from specd.worker.engine.engine import Engine

        return Engine
    raise AttributeError(name)
