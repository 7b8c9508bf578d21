"""The OpenAI-compatible HTTP app in front of the engine.

``create_app(engine, tokenizer, settings, registry)`` builds a FastAPI app:
POST /v1/completions, POST /v1/chat/completions (stream or not), GET /v1/models (and
/v1/models/{id}), GET /healthz, GET /readyz, GET /metrics, and POST /specd/v1/probe
(``probe``: greedy outputs with the target's top-2 gaps, for the operator's lossless probes).
Request handling is a straight line: validate -> tokenize -> check limits -> admit -> submit
to the engine -> answer (JSON or SSE). Every refusal is an ``APIError`` answered in OpenAI's
error shape; nothing a client sends may produce a 5xx.
"""

from __future__ import annotations

import asyncio
import contextlib
import logging
import time
from collections.abc import AsyncIterator
from dataclasses import dataclass, field
from typing import Any, Protocol

from fastapi import FastAPI, Request
from fastapi.exceptions import RequestValidationError
from fastapi.responses import JSONResponse, PlainTextResponse, Response, StreamingResponse
from prometheus_client import CONTENT_TYPE_LATEST, CollectorRegistry, generate_latest
from starlette.exceptions import HTTPException as StarletteHTTPException

from specd.api import metrics as metric_names
from specd.api.policy import Policy
from specd.worker.engine.api import (
    EngineError,
    GenerationRequest,
    SamplingParams,
    StreamEvent,
)
from specd.worker.server import sse
from specd.worker.server.admission import Admission
from specd.worker.server.errors import APIError, bad_request, validation_message
from specd.worker.server.metrics import ServerMetrics
from specd.worker.server.openai_schema import (
    AssistantMessage,
    ChatChoice,
    ChatChunkChoice,
    ChatCompletionChunk,
    ChatCompletionRequest,
    ChatCompletionResponse,
    ChatDelta,
    CompletionChoice,
    CompletionRequest,
    CompletionResponse,
    ErrorResponse,
    ModelCard,
    ModelList,
    SpeculativeUsage,
    Usage,
    _Sampling,
)
from specd.worker.server.policy_watch import PolicyWatcher
from specd.worker.server.probe import add_probe_route

log = logging.getLogger("specd.worker.server")


class EngineLike(Protocol):
    """The part of ``specd.worker.engine.Engine`` the server uses."""

    ready: bool

    def submit(self, request: GenerationRequest) -> AsyncIterator[StreamEvent]: ...
    def cancel(self, request_id: str) -> None: ...
    def set_policy(self, policy: Policy) -> None: ...
    def stats(self) -> Any: ...
    async def start(self) -> None: ...
    async def stop(self, drain: bool = True) -> None: ...


@dataclass
class ServerSettings:
    """What the server enforces in front of the engine (``specd serve`` flags)."""

    model_name: str  # the id clients send as ``model`` and /v1/models lists
    max_context: int  # prompt + max_tokens must fit (the engine's usable context or less)
    capacity: int = 96  # requests admitted at once (engine slots + waiting queue)
    aliases: tuple[str, ...] = ()  # further accepted model names (e.g. the model reference)
    default_max_tokens: int = 16  # /v1/completions without max_tokens (OpenAI's default)
    revision: str = "dev"
    track: str = "stable"
    policy_file: str | None = None
    policy_initial_text: str | None = None  # what start-up loaded (not counted as a change)
    policy_poll_s: float = 1.0
    grace_period_s: float = 30.0
    manage_engine: bool = True  # start/stop the engine with the app's lifespan
    created: int = field(default_factory=lambda: int(time.time()))


ERROR_RESPONSES: dict[int | str, dict[str, Any]] = {
    code: {"model": ErrorResponse, "description": text}
    for code, text in ((400, "bad request (limits, unsupported parameter, malformed JSON)"),
                       (404, "unknown model"), (422, "wrong types or missing fields"),
                       (429, "admission queue full; see Retry-After"),
                       (503, "not ready, or draining on shutdown"))
}


class Server:
    """State behind the routes: the engine, tokenizer, admission and metrics."""

    def __init__(self, engine: EngineLike, tokenizer: Any, settings: ServerSettings,
                 registry: CollectorRegistry) -> None:
        self.engine = engine
        self.tokenizer = tokenizer
        self.settings = settings
        self.registry = registry
        self.admission = Admission(settings.capacity)
        self.metrics = ServerMetrics(registry, settings.revision, settings.track,
                                     stats=engine.stats)
        self.vocab_size = len(tokenizer)
        self.watcher: PolicyWatcher | None = None
        if settings.policy_file:
            self.watcher = PolicyWatcher(settings.policy_file, apply=engine.set_policy,
                                         on_refuse=lambda _reason: self.metrics.reload_error(),
                                         interval=settings.policy_poll_s,
                                         initial_text=settings.policy_initial_text)

    # ---- request preparation (pure checks, raise APIError) ---------------------------------

    def check_model(self, name: str) -> None:
        if name != self.settings.model_name and name not in self.settings.aliases:
            raise APIError(404, f"The model '{name}' does not exist; this worker serves "
                           f"'{self.settings.model_name}'.", param="model",
                           code="model_not_found")

    def check_supported(self, body: _Sampling) -> None:
        invalid = body.invalid_fields()
        if invalid:
            param, why, code = invalid[0]
            raise bad_request(why, param=param, code=code)
        problems = body.unsupported_fields()
        if problems:
            param, why = problems[0]
            raise bad_request(why, param=param, code="unsupported_parameter")

    def completion_prompt(self, body: CompletionRequest) -> list[int]:
        prompt = body.prompt
        if isinstance(prompt, list):
            if not prompt:
                raise bad_request("prompt must not be empty", param="prompt")
            if isinstance(prompt[0], (str, list)):
                if len(prompt) != 1:
                    raise bad_request("a list prompt must hold exactly one prompt "
                                      "(batched prompts are not supported; send parallel "
                                      "requests)", param="prompt")
                prompt = prompt[0]
        if isinstance(prompt, str):
            ids = list(self.tokenizer.encode(prompt))
        else:
            ids = [int(t) for t in prompt]
            bad = [t for t in ids if not 0 <= t < self.vocab_size]
            if bad:
                raise bad_request(f"prompt token id {bad[0]} is outside the vocabulary "
                                  f"[0, {self.vocab_size})", param="prompt")
        if not ids:
            raise bad_request("prompt must not be empty", param="prompt")
        return ids

    def chat_prompt(self, body: ChatCompletionRequest) -> list[int]:
        messages = [{"role": m.role if m.role != "developer" else "system", "content": m.text()}
                    for m in body.messages]
        try:
            ids = self.tokenizer.apply_chat_template(messages, add_generation_prompt=True,
                                                     tokenize=True)
        except Exception as exc:  # a template may reject an order of roles, for example
            raise bad_request(f"messages do not fit the model's chat template: {exc}",
                              param="messages") from exc
        if not isinstance(ids, list):  # newer transformers return a BatchEncoding
            ids = ids["input_ids"]
        return list(ids)

    def token_budget(self, prompt_len: int, requested: int | None, param: str,
                     default: int | None) -> int:
        """max_tokens after the context check; a 400 names the limit when it does not fit."""
        limit = self.settings.max_context
        if requested is None:
            room = limit - prompt_len
            if room < 1:
                raise bad_request(
                    f"This model's maximum context length is {limit} tokens; the prompt "
                    f"alone has {prompt_len} tokens.", param="messages" if param ==
                    "max_completion_tokens" else "prompt", code="context_length_exceeded")
            return room if default is None else min(default, room)
        if prompt_len + requested > limit:
            raise bad_request(
                f"This model's maximum context length is {limit} tokens. However, you "
                f"requested {prompt_len + requested} tokens ({prompt_len} in the prompt, "
                f"{requested} for the completion). Reduce the prompt or {param}.",
                param=param, code="context_length_exceeded")
        return requested

    def sampling(self, body: _Sampling, max_tokens: int) -> SamplingParams:
        top_k = body.top_k if body.top_k is not None and body.top_k > 0 else 0
        try:
            return SamplingParams(
                max_tokens=max_tokens,
                temperature=1.0 if body.temperature is None else body.temperature,
                top_p=1.0 if body.top_p is None else body.top_p, top_k=top_k,
                seed=body.seed, stop=tuple(body.stop_list()))
        except EngineError as exc:
            raise bad_request(str(exc)) from exc

    def admit(self, group: str) -> None:
        if not self.engine.ready:
            raise APIError(503, "the model is still loading", type="service_unavailable",
                           code="not_ready", headers={"Retry-After": "5"})
        if self.admission.try_admit():
            return
        retry = str(self.admission.retry_after())
        if self.admission.draining:
            raise APIError(503, "the worker is shutting down", type="service_unavailable",
                           code="draining", headers={"Retry-After": retry})
        raise APIError(429, f"too many requests in flight ({self.admission.capacity}); retry "
                       f"after {retry}s", type="rate_limit_error", code="queue_full",
                       headers={"Retry-After": retry})


def task_group_of(request: Request, body: _Sampling) -> str:
    name = request.headers.get(metric_names.TASK_GROUP_HEADER)
    if not name and body.metadata is not None:
        name = body.metadata.task_group
    return metric_names.task_group(name)


def usage_of(event: StreamEvent) -> Usage:
    spec = event.spec
    return Usage(prompt_tokens=event.prompt_tokens, completion_tokens=event.completion_tokens,
                 total_tokens=event.prompt_tokens + event.completion_tokens,
                 speculative=SpeculativeUsage(rounds=spec.rounds, drafted=spec.drafted,
                                              verified=spec.verified, accepted=spec.accepted,
                                              tau=round(spec.tau, 4)))


FINISH = {"stop": "stop", "length": "length"}


class _SSEResponse(StreamingResponse):
    """A stream that always ends its request's life, even if the body never started (the
    client left before the first byte) or a send failed: the slot and KV cache are freed."""

    def __init__(self, content: AsyncIterator[bytes], on_close: Any) -> None:
        super().__init__(content, media_type=sse.MEDIA_TYPE, headers=sse.HEADERS)
        self.on_close = on_close

    async def __call__(self, scope: Any, receive: Any, send: Any) -> None:
        try:
            await super().__call__(scope, receive, send)
        finally:
            with contextlib.suppress(Exception):
                await self.body_iterator.aclose()  # type: ignore[attr-defined]
            self.on_close()


class _Run:
    """One admitted request's life: submit, relay events, account, always release."""

    def __init__(self, server: Server, request: GenerationRequest, group: str) -> None:
        self.server = server
        self.request = request
        self.group = group
        self.start = time.perf_counter()
        self.first_token: float | None = None
        self.last: StreamEvent | None = None
        self.done = False
        self._stream: AsyncIterator[StreamEvent] | None = None

    def submit(self) -> None:
        """Hand the request to the engine now, so a refusal is still a clean 400."""
        try:
            self._stream = self.server.engine.submit(self.request)
        except EngineError as exc:
            self.done = True  # nothing runs: nothing to cancel
            self.close(outcome="")  # the error handler counts the rejection
            raise bad_request(str(exc)) from exc

    async def events(self) -> AsyncIterator[StreamEvent]:
        assert self._stream is not None, "submit() first"
        try:
            async for event in self._stream:
                if self.first_token is None and event.token_ids:
                    self.first_token = time.perf_counter() - self.start
                self.last = event
                if event.finished:
                    self.done = True
                    if event.finish_reason == "error":
                        raise APIError(500, event.error or "generation failed",
                                       type="server_error", code="engine_error")
                yield event
                if event.finished:
                    return
        finally:
            self.close()

    def close(self, outcome: str | None = None) -> None:
        if getattr(self, "_closed", False):
            return
        self._closed = True
        latency = time.perf_counter() - self.start
        metrics = self.server.metrics
        if outcome is not None:
            if outcome:
                metrics.outcome(outcome, self.group)
        elif self.done and self.last is not None and self.last.finish_reason != "error":
            metrics.outcome("finished", self.group)
            metrics.timings(self.group, latency, self.first_token,
                            self.last.completion_tokens)
        elif self.done:
            metrics.outcome("error", self.group)
        else:  # the client went away (or shutdown cancelled us): free the slot now
            self.server.engine.cancel(self.request.request_id)
            metrics.outcome("cancelled", self.group)
        self.server.admission.release(latency if self.done else None)


async def _collect(run: _Run) -> tuple[str, StreamEvent]:
    parts: list[str] = []
    async for event in run.events():
        parts.append(event.text)
    assert run.last is not None
    return "".join(parts), run.last


async def _until_done_or_gone(http: Request, run: _Run) -> tuple[str, StreamEvent]:
    """Collect a non-streamed result, cancelling the generation if the client leaves."""
    task = asyncio.ensure_future(_collect(run))
    try:
        while True:
            done, _ = await asyncio.wait({task}, timeout=0.25)
            if done:
                return task.result()
            if await http.is_disconnected():
                task.cancel()
                with contextlib.suppress(asyncio.CancelledError, Exception):
                    await task
                raise asyncio.CancelledError("client disconnected")
    finally:
        if not task.done():
            task.cancel()
            with contextlib.suppress(asyncio.CancelledError, Exception):
                await task
        run.close()


def create_app(engine: EngineLike, tokenizer: Any, settings: ServerSettings,
               registry: CollectorRegistry | None = None) -> FastAPI:
    registry = registry if registry is not None else CollectorRegistry()
    server = Server(engine, tokenizer, settings, registry)

    start_failed: list[BaseException] = []

    async def start_engine() -> None:
        try:
            await engine.start()
            log.info("engine ready: %s", engine.stats())
        except Exception as exc:  # /healthz turns 500, so the kubelet restarts the pod
            log.exception("engine start failed")
            start_failed.append(exc)

    @contextlib.asynccontextmanager
    async def lifespan(_app: FastAPI) -> AsyncIterator[None]:
        # The engine starts (measures its step costs) while the port already answers:
        # /healthz says alive, /readyz says 503 until the engine is ready.
        starting = asyncio.ensure_future(start_engine()) if settings.manage_engine else None
        if server.watcher is not None:
            server.watcher.start()
        log.info("serving %s (revision %s, track %s)", settings.model_name, settings.revision,
                 settings.track)
        try:
            yield
        finally:
            server.admission.draining = True
            if server.watcher is not None:
                await server.watcher.stop()
            if starting is not None:
                if not starting.done():
                    await starting  # a half-started engine cannot be stopped cleanly
                try:
                    await asyncio.wait_for(engine.stop(drain=True),
                                           timeout=max(1.0, settings.grace_period_s))
                except TimeoutError:
                    log.warning("engine drain exceeded the grace period; stopping now")
                    await engine.stop(drain=False)

    app = FastAPI(title="specd worker", version="1", lifespan=lifespan,
                  description="OpenAI-compatible completions served by the specd engine "
                              "(speculative decoding; outputs follow the target model).")
    app.state.server = server

    @app.exception_handler(APIError)
    async def _api_error(_request: Request, exc: APIError) -> JSONResponse:
        if exc.status < 500:
            server.metrics.rejected(exc.status)
        return exc.response()

    @app.exception_handler(RequestValidationError)
    async def _validation(_request: Request, exc: RequestValidationError) -> JSONResponse:
        errors = list(exc.errors())
        if any(e.get("type") == "json_invalid" for e in errors):
            err = APIError(400, "malformed JSON body: " + validation_message(errors)[0],
                           code="invalid_json")
        else:
            message, param = validation_message(errors)
            err = APIError(422, message, param=param, code="invalid_type")
        server.metrics.rejected(err.status)
        return err.response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(_request: Request, exc: StarletteHTTPException) -> JSONResponse:
        kind = "not_found_error" if exc.status_code == 404 else "invalid_request_error"
        return APIError(exc.status_code, str(exc.detail), type=kind).response()

    @app.get("/healthz", response_class=PlainTextResponse,
             responses={500: {"description": "the engine failed to start or its thread died"}})
    async def healthz() -> Response:
        if start_failed:
            return PlainTextResponse(f"engine failed to start: {start_failed[0]}", 500)
        if not getattr(engine, "alive", True):
            return PlainTextResponse("engine round thread is not running", 500)
        return PlainTextResponse("ok")

    @app.get("/readyz", responses={503: {"description": "not ready or draining"}})
    async def readyz() -> JSONResponse:
        ready = bool(engine.ready) and not server.admission.draining
        body: dict[str, Any] = {"ready": ready, "engine_ready": bool(engine.ready),
                                "draining": server.admission.draining}
        with contextlib.suppress(Exception):  # details are best-effort
            stats = engine.stats()
            body |= {"drafter": stats.drafter, "policy_mode": stats.policy_mode,
                     "policy_version": stats.policy_version}
        return JSONResponse(body, status_code=200 if ready else 503)

    @app.get("/metrics", response_class=PlainTextResponse)
    async def metrics() -> Response:
        return Response(generate_latest(registry), media_type=CONTENT_TYPE_LATEST)

    @app.get("/v1/models", response_model=ModelList)
    async def models() -> ModelList:
        return ModelList(data=[ModelCard(id=settings.model_name, created=settings.created,
                                         max_model_len=settings.max_context)])

    @app.get("/v1/models/{model_id:path}", response_model=ModelCard,
             responses={404: ERROR_RESPONSES[404]})
    async def model(model_id: str) -> ModelCard:
        """One model (``client.models.retrieve``): the served one or one of its aliases."""
        server.check_model(model_id)
        return ModelCard(id=model_id, created=settings.created,
                         max_model_len=settings.max_context)

    add_probe_route(app, server)  # POST /specd/v1/probe: the operator's lossless probes

    @app.post("/v1/completions", response_model=CompletionResponse, responses=ERROR_RESPONSES)
    async def completions(body: CompletionRequest, http: Request) -> Response:
        server.check_model(body.model)
        server.check_supported(body)
        ids = server.completion_prompt(body)
        max_tokens = server.token_budget(len(ids), body.max_tokens, "max_tokens",
                                         settings.default_max_tokens)
        return await _generate(http, body, ids, max_tokens, chat=False)

    @app.post("/v1/chat/completions", response_model=ChatCompletionResponse,
              responses=ERROR_RESPONSES)
    async def chat_completions(body: ChatCompletionRequest, http: Request) -> Response:
        server.check_model(body.model)
        server.check_supported(body)
        ids = server.chat_prompt(body)
        param = "max_completion_tokens" if body.max_completion_tokens is not None else "max_tokens"
        max_tokens = server.token_budget(len(ids), body.token_limit(), param, None)
        return await _generate(http, body, ids, max_tokens, chat=True)

    async def _generate(http: Request, body: _Sampling, ids: list[int], max_tokens: int,
                        chat: bool) -> Response:
        group = task_group_of(http, body)
        params = server.sampling(body, max_tokens)
        request = GenerationRequest(prompt_token_ids=ids, params=params, task_group=group)
        server.admit(group)
        run = _Run(server, request, group)
        run.submit()
        rid = ("chatcmpl-" if chat else "cmpl-") + request.request_id
        created = int(time.time())
        if body.stream:
            return _SSEResponse(_stream(run, rid, created, body, chat), on_close=run.close)
        try:
            text, last = await _until_done_or_gone(http, run)
        except EngineError as exc:
            raise bad_request(str(exc)) from exc
        finish = FINISH.get(last.finish_reason or "stop", "stop")
        usage = usage_of(last)
        if chat:
            return JSONResponse(ChatCompletionResponse(
                id=rid, created=created, model=settings.model_name, usage=usage,
                choices=[ChatChoice(message=AssistantMessage(content=text),
                                    finish_reason=finish)]).model_dump(mode="json"))
        return JSONResponse(CompletionResponse(
            id=rid, created=created, model=settings.model_name, usage=usage,
            choices=[CompletionChoice(text=text, finish_reason=finish)]).model_dump(mode="json"))

    async def _stream(run: _Run, rid: str, created: int, body: _Sampling,
                      chat: bool) -> AsyncIterator[bytes]:
        model = settings.model_name

        def chunk(text: str | None, finish: str | None, role: bool = False) -> bytes:
            if chat:
                delta = ChatDelta(role="assistant" if role else None, content=text)
                return sse.event(ChatCompletionChunk(
                    id=rid, created=created, model=model,
                    choices=[ChatChunkChoice(delta=delta, finish_reason=finish)]))
            return sse.event(CompletionResponse(
                id=rid, created=created, model=model,
                choices=[CompletionChoice(text=text or "", finish_reason=finish)]))

        try:
            if chat:
                yield chunk("", None, role=True)
            async for event in run.events():
                finish = FINISH.get(event.finish_reason or "stop") if event.finished else None
                if event.text or finish:
                    yield chunk(event.text, finish)
            if body.include_usage() and run.last is not None:
                usage = usage_of(run.last)
                cls = ChatCompletionChunk if chat else CompletionResponse
                yield sse.event(cls(id=rid, created=created, model=model, choices=[],
                                    usage=usage))
            yield sse.DONE
        except (APIError, EngineError) as exc:
            err = exc if isinstance(exc, APIError) else bad_request(str(exc))
            yield sse.event(err.body())
            yield sse.DONE

    return app
