"""OpenAI-compatible request and response models (the subset specd serves).

Requests are validated strictly (``"5"`` is not an integer) so wrong types are refused with a
clear message rather than guessed at. Fields specd does not implement but clients commonly
send with their neutral value (``presence_penalty: 0``, ``logprobs: null``) are accepted; a
non-neutral value is refused by ``unsupported_fields`` with a message naming the field.
Unknown extra fields are ignored, as OpenAI-compatible servers usually do.
"""

from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

MAX_STOP_SEQUENCES = 4
MAX_STOP_LENGTH = 256


class _Request(BaseModel):
    model_config = ConfigDict(strict=True, extra="ignore")


class StreamOptions(_Request):
    include_usage: bool = False


class RequestMetadata(BaseModel):
    """Free-form metadata; specd reads ``task_group`` (a label on its metrics)."""

    model_config = ConfigDict(extra="allow")
    task_group: str | None = Field(None, max_length=64)


class _Sampling(_Request):
    """Parameters shared by both endpoints."""

    model: str = Field(..., min_length=1, max_length=256)
    max_tokens: int | None = Field(None, ge=1, description="tokens to generate at most")
    temperature: float | None = Field(None, ge=0.0, le=2.0, description="0 is greedy")
    top_p: float | None = Field(None, gt=0.0, le=1.0)
    top_k: int | None = Field(None, ge=-1, description="-1 or 0 disables top-k")
    stop: str | list[str] | None = Field(None, description=f"up to {MAX_STOP_SEQUENCES} strings")
    seed: int | None = Field(None, ge=0, le=2**63 - 1)
    n: int = Field(1, ge=1, le=16, description="completions per request (only 1 is served)")
    stream: bool = False
    stream_options: StreamOptions | None = None
    user: str | None = None
    metadata: RequestMetadata | None = None
    # accepted only with their neutral value (see unsupported_fields)
    presence_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    frequency_penalty: float | None = Field(None, ge=-2.0, le=2.0)
    logit_bias: dict[str, float] | None = None
    best_of: int | None = Field(None, ge=1, le=16)

    @model_validator(mode="after")
    def _check_stop(self) -> _Sampling:
        stops = self.stop_list()
        if len(stops) > MAX_STOP_SEQUENCES:
            raise ValueError(f"stop: at most {MAX_STOP_SEQUENCES} sequences")
        if any(not s or len(s) > MAX_STOP_LENGTH for s in stops):
            raise ValueError(f"stop: each sequence must have 1..{MAX_STOP_LENGTH} characters")
        return self

    def stop_list(self) -> list[str]:
        if self.stop is None:
            return []
        return [self.stop] if isinstance(self.stop, str) else list(self.stop)

    def include_usage(self) -> bool:
        return bool(self.stream_options and self.stream_options.include_usage)

    def invalid_fields(self) -> list[tuple[str, str, str]]:
        """(field, why, code) for each combination OpenAI refuses with a 400 although every
        field on its own has the right type."""
        problems: list[tuple[str, str, str]] = []
        if self.stream_options is not None and not self.stream:
            problems.append(("stream_options", "The 'stream_options' parameter is only "
                             "allowed when 'stream' is enabled.", "invalid_parameter"))
        return problems

    def unsupported_fields(self) -> list[tuple[str, str]]:
        """(field, why) for each parameter set to something specd does not serve."""
        problems: list[tuple[str, str]] = []
        if self.n != 1:
            problems.append(("n", "only n=1 is supported; send parallel requests instead"))
        if self.best_of not in (None, 1):
            problems.append(("best_of", "best_of is not supported"))
        for name in ("presence_penalty", "frequency_penalty"):
            if getattr(self, name) not in (None, 0, 0.0):
                problems.append((name, f"{name} is not supported (it would change the "
                                 "target distribution speculative verification preserves)"))
        if self.logit_bias:
            problems.append(("logit_bias", "logit_bias is not supported"))
        return problems


class CompletionRequest(_Sampling):
    """POST /v1/completions."""

    prompt: str | list[str] | list[int] | list[list[int]] = Field(
        ..., description="a string, or token ids; a list holds exactly one prompt")
    echo: bool = False
    suffix: str | None = None
    logprobs: int | None = Field(None, ge=0, le=20)

    def unsupported_fields(self) -> list[tuple[str, str]]:
        problems = super().unsupported_fields()
        if self.logprobs is not None:
            problems.append(("logprobs", "logprobs are not supported"))
        if self.echo:
            problems.append(("echo", "echo is not supported"))
        if self.suffix:
            problems.append(("suffix", "suffix (insertion) is not supported"))
        return problems


class TextPart(_Request):
    type: Literal["text"]
    text: str


class ChatMessage(_Request):
    role: Literal["system", "developer", "user", "assistant", "tool"]
    # required (``ChatCompletionRequest.invalid_fields``), except on an assistant message
    # that carries tool calls, as in OpenAI's API
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None

    def text(self) -> str:
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(part.text for part in self.content)


class ResponseFormat(_Request):
    type: Literal["text", "json_object", "json_schema"]


class ChatCompletionRequest(_Sampling):
    """POST /v1/chat/completions."""

    messages: list[ChatMessage] = Field(..., min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    response_format: ResponseFormat | None = None

    def invalid_fields(self) -> list[tuple[str, str, str]]:
        problems = super().invalid_fields()
        for i, m in enumerate(self.messages):
            if m.content is None and not (m.role == "assistant" and m.tool_calls):
                param = f"messages[{i}].content"
                problems.append((param, f"Missing required parameter: '{param}'.",
                                 "missing_required_parameter"))
        return problems

    def token_limit(self) -> int | None:
        # max_completion_tokens is the newer name; it wins when both are given
        return self.max_completion_tokens if self.max_completion_tokens is not None else self.max_tokens

    def unsupported_fields(self) -> list[tuple[str, str]]:
        problems = super().unsupported_fields()
        if self.logprobs or self.top_logprobs:
            problems.append(("logprobs", "logprobs are not supported"))
        if self.tools:
            problems.append(("tools", "tool calling is not supported"))
        if self.tool_choice not in (None, "none", "auto"):
            problems.append(("tool_choice", "tool calling is not supported"))
        if self.response_format is not None and self.response_format.type != "text":
            problems.append(("response_format", "only response_format type 'text' is supported"))
        return problems


# ---- responses -----------------------------------------------------------------------------


class SpeculativeUsage(BaseModel):
    """Per-request speculative accounting (DESIGN.md words)."""

    rounds: int = 0
    drafted: int = 0
    verified: int = 0
    accepted: int = 0
    tau: float = Field(0.0, description="mean tokens committed per round (accepted + 1)")


class Usage(BaseModel):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int
    speculative: SpeculativeUsage = Field(default_factory=SpeculativeUsage)


class CompletionChoice(BaseModel):
    index: int = 0
    text: str
    logprobs: None = None
    finish_reason: str | None = None


class CompletionResponse(BaseModel):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    choices: list[CompletionChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class AssistantMessage(BaseModel):
    role: Literal["assistant"] = "assistant"
    content: str | None = None


class ChatChoice(BaseModel):
    index: int = 0
    message: AssistantMessage
    logprobs: None = None
    finish_reason: str | None = None


class ChatCompletionResponse(BaseModel):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    choices: list[ChatChoice]
    usage: Usage | None = None
    system_fingerprint: str | None = None


class ChatDelta(BaseModel):
    role: Literal["assistant"] | None = None
    content: str | None = None


class ChatChunkChoice(BaseModel):
    index: int = 0
    delta: ChatDelta
    logprobs: None = None
    finish_reason: str | None = None


class ChatCompletionChunk(BaseModel):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class ModelCard(BaseModel):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "specd"
    max_model_len: int | None = None


class ModelList(BaseModel):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class ErrorBody(BaseModel):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(BaseModel):
    """OpenAI's error shape."""

    error: ErrorBody
