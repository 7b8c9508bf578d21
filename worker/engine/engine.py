"""The engine facade: async submit/stream over a background round thread (see ``api``).

The round thread does all of the engine's tensor work, start-up profiling included, with
``EngineConfig.threads`` intra-op threads (``threads`` explains why one thread owns them)."""

from __future__ import annotations

import asyncio
import logging
import threading
import time
from collections.abc import AsyncIterator
from typing import Any

from specd.api.policy import Policy
from specd.worker.engine.api import (
    EngineConfig,
    EngineError,
    EngineStats,
    GenerationRequest,
    RequestOutput,
    StreamEvent,
)

log = logging.getLogger("specd.worker.engine")


class Engine:
    """One target model, one drafter, one policy at a time (swappable between rounds)."""

    def __init__(self, loaded: Any, config: EngineConfig | None = None,
                 policy: Policy | None = None, registry: Any = None,
                 drafter_net: Any = None, costs: Any = None, runner: Any = None,
                 metric_labels: dict[str, str] | None = None) -> None:
        """``loaded``: a ``specd.worker.model.LoadedModel`` (tokenizer may be None in tests).
        ``drafter_net``: an already bound net (tests); ``costs``: a CostTable to skip profiling;
        ``runner``: a LlamaRunner over the same model to share (several engines, one model);
        ``metric_labels``: constant labels on every engine metric (e.g. revision, track)."""
        from specd.worker.drafters.registry import build_drafter
        from specd.worker.engine.core import EngineCore
        from specd.worker.engine.llama import LlamaRunner
        from specd.worker.engine.metrics import EngineMetrics

        self.config = config or EngineConfig()
        self.loaded = loaded
        self.runner = runner or LlamaRunner(loaded.model)
        self.drafter = build_drafter(self.config.drafter, loaded, self.config.drafter_path,
                                     self.config.max_slots, self.config.max_context, drafter_net,
                                     lookup=self.config.prompt_lookup)
        self.metrics = EngineMetrics(registry, metric_labels)
        self.core = EngineCore(self.runner, self.drafter, loaded.tokenizer, self.config,
                               policy or Policy(), self.metrics, costs)
        self._costs_ready = self.config.cost_profile == "none"
        if costs is not None:
            self.use_costs(costs)
        self._thread: threading.Thread | None = None
        self._started = threading.Event()
        self._start_error: BaseException | None = None
        self._wake = threading.Event()
        self._stopping = False
        self._draining = False

    @classmethod
    def from_model(cls, reference: str, config: EngineConfig | None = None,
                   policy: Policy | None = None, registry: Any = None, device: str = "auto",
                   dtype: str = "auto", metric_labels: dict[str, str] | None = None) -> Engine:
        from specd.worker.model import load_model

        return cls(load_model(reference, device, dtype), config, policy, registry,
                   metric_labels=metric_labels)

    # -- lifecycle ---------------------------------------------------------------------------
    @property
    def ready(self) -> bool:
        """Model and drafter loaded, step-cost table measured."""
        return self._costs_ready

    def use_costs(self, costs: Any) -> None:
        """Take a step-cost table (``scheduler.CostTable``) measured for the same target on
        the same device, by another engine, instead of measuring one at start."""
        self.core.costs = costs
        self.runner.set_padding(costs)
        self._costs_ready = True

    def prepare(self) -> None:
        """Measure the step-cost table (blocking). The round thread calls it first."""
        if not self._costs_ready:
            from specd.worker.engine.cost import measure_costs

            self.core.costs = measure_costs(self.runner, self.core.cache,
                                            self.core.policy.max_batch_tokens)
            self.runner.set_padding(self.core.costs)
            self._costs_ready = True

    async def start(self) -> None:
        """Start the round thread and wait until it has prepared (re-raises its failure)."""
        self.start_thread()
        await asyncio.to_thread(self._started.wait)
        if self._start_error is not None:
            error, self._start_error = self._start_error, None
            self._thread = None
            raise error

    def start_thread(self) -> None:
        if self._thread is None:
            self._stopping = False
            self._started.clear()
            self._thread = threading.Thread(target=self._loop, name="specd-engine", daemon=True)
            self._thread.start()

    @property
    def alive(self) -> bool:
        """False once the round thread has died (it never should: /healthz reports it)."""
        return self._thread is None or self._thread.is_alive()

    def _loop(self) -> None:
        from specd.worker.engine.threads import use_threads

        use_threads(self.config.threads)
        try:
            self.prepare()
        except Exception as exc:
            log.exception("engine start-up failed")
            self._start_error = exc
            return
        finally:
            self._started.set()
        while not self._stopping:
            # clear before the round: a submit during the round sets it again, so the wait
            # below returns at once instead of sleeping on work that is already queued
            self._wake.clear()
            try:
                worked = self.core.step()
            except Exception as exc:  # keep serving: fail the affected requests, log, go on
                log.exception("engine round failed")
                self.core.fail_all(f"{type(exc).__name__}: {exc}")
                continue
            if not worked:
                if self._draining:
                    break
                self._wake.wait(0.05)

    async def stop(self, drain: bool = True) -> None:
        """Stop the round thread; ``drain`` finishes queued and running requests first."""
        if not drain:
            self.core.cancel_all()
        self._draining = True
        self._wake.set()
        if self._thread is not None:
            await asyncio.to_thread(self._thread.join)
            self._thread = None
        self._draining = False

    # -- requests ----------------------------------------------------------------------------
    def submit(self, request: GenerationRequest) -> AsyncIterator[StreamEvent]:
        """Queue a request; iterate the result for its events (the last has finished=True).

        Raises EngineError at once for a request the engine cannot serve.
        """
        if self._draining:
            raise EngineError("engine is stopping")
        loop = asyncio.get_running_loop()
        queue: asyncio.Queue[StreamEvent] = asyncio.Queue()

        def sink(event: StreamEvent) -> None:
            loop.call_soon_threadsafe(queue.put_nowait, event)

        self.core.add(request, sink)
        self._wake.set()
        return _events(queue, self, request.request_id)

    def cancel(self, request_id: str) -> None:
        """Stop a request; its KV slot is freed at the start of the next round."""
        self.core.cancel(request_id)
        self._wake.set()

    def set_policy(self, policy: Policy) -> None:
        """Takes effect at the next round. Re-validated here: a Policy built with
        ``model_construct`` or mutated after validation must not reach the scheduler."""
        self.core.set_policy(Policy.model_validate(policy.model_dump()))
        self._wake.set()

    @property
    def policy(self) -> Policy:
        return self.core.policy

    def stats(self) -> EngineStats:
        return self.core.stats(self.ready)

    @property
    def phase_seconds(self) -> dict[str, float]:
        """Cumulative round time by phase (draft, schedule, verify, commit), for benchmarks."""
        return dict(self.core.phase_seconds)

    @property
    def costs(self) -> Any:
        """The step-cost table the scheduler uses (``scheduler.CostTable``)."""
        return self.core.costs

    def memory_bytes(self) -> dict[str, int]:
        """Target weights, target KV cache, drafter (own weights and caches)."""
        target = sum(p.nbytes for p in self.loaded.model.parameters())
        return {"target": target, "kv_cache": self.core.cache.nbytes,
                "drafter": self.drafter.nbytes()}

    def score(self, token_ids: list[int], first: int) -> list[tuple[int, int, float]]:
        """The target's own two best tokens and their logit gap for each position of
        ``token_ids`` from ``first`` on: (top-1, top-2, logit(top-1) - logit(top-2)), from
        one plain teacher-forced forward of the target (no drafter, a cache of its own, the
        engine's kernels and dtype). Safe beside the round thread: it only reads weights."""
        import torch

        if not 1 <= first < len(token_ids):
            raise EngineError(f"score: first must be in 1..{len(token_ids) - 1}, got {first}")
        from specd.worker.engine.llama import Row

        cache = self.runner.new_cache(1, len(token_ids) + 64)  # room for the runner's padding
        out = self.runner.forward(cache, [Row(0, list(token_ids[:-1]), want="all")])
        assert out.logits is not None
        top = torch.topk(out.logits[first - 1:], 2, dim=-1)  # logits at j-1 predict token j
        values, ids = top.values.tolist(), top.indices.tolist()
        return [(i[0], i[1], v[0] - v[1]) for i, v in zip(ids, values, strict=True)]

    def generate(self, requests: list[GenerationRequest]) -> list[RequestOutput]:
        """Run the given requests to completion on the calling thread (tests, benchmarks)."""
        if self._thread is not None:
            raise EngineError("generate() runs rounds itself: stop the engine thread first")
        results: dict[str, RequestOutput] = {}
        starts: dict[str, float] = {}
        firsts: dict[str, float] = {}

        def sink_for(req: GenerationRequest):
            out = RequestOutput(req.request_id, list(req.prompt_token_ids), [], "", "length",
                                None)  # type: ignore[arg-type]

            def sink(ev: StreamEvent) -> None:
                if ev.token_ids and req.request_id not in firsts:
                    firsts[req.request_id] = time.perf_counter()
                out.token_ids.extend(ev.token_ids)
                out.text += ev.text
                out.spec = ev.spec
                if ev.finished:
                    out.finish_reason = ev.finish_reason  # type: ignore[assignment]
                    now = time.perf_counter()
                    out.latency_s = now - starts[req.request_id]
                    out.first_token_s = firsts.get(req.request_id, now) - starts[req.request_id]
                    results[req.request_id] = out
            return sink

        for req in requests:
            starts[req.request_id] = time.perf_counter()
            self.core.add(req, sink_for(req))
        while len(results) < len(requests):
            if not self.core.step() and len(results) < len(requests):
                raise EngineError("engine stalled with unfinished requests")
        return [results[r.request_id] for r in requests]


async def _events(queue: asyncio.Queue, engine: Engine, request_id: str
                  ) -> AsyncIterator[StreamEvent]:
    finished = False
    try:
        while True:
            event = await queue.get()
            yield event
            if event.finished:
                finished = True
                return
    finally:
        if not finished:  # the consumer went away (client disconnect): free the slot
            engine.cancel(request_id)
