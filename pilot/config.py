"""The pilot file: groups, task groups, SLO, capacity sweep, traces, repeats, seed.

Every model forbids unknown keys, so a misspelt key is refused with its path named
(``groups.G1.serve.drafter``); ``load_pilot`` turns pydantic's errors into one
``PilotError`` line per problem, each starting with the field's dotted path. What can be
checked without a server is checked here (an impossible SLO among them); what needs the
servers (reachability, an SLO no idle server can meet) is the runner's preflight, still
before any load is sent.
"""

from __future__ import annotations

import math
from pathlib import Path
from typing import Any, Literal

import yaml
from pydantic import (
    BaseModel,
    ConfigDict,
    Field,
    ValidationError,
    field_validator,
    model_validator,
)

from specd import SpecdError

GROUPS = ("G0", "G1", "G2")
ROLES = {"G0": "current plain service", "G1": "speculative strategy (frozen)",
         "G2": "equal-resource plain alternative"}


class PilotError(SpecdError):
    """A pilot file refused; the message names the field."""


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid")


class ServeSettings(_Strict):
    """A ``specd serve`` process the pilot starts on 127.0.0.1 (flags of the same name)."""

    model: str = "smollm2-135m"
    drafter: str = "none"
    drafter_path: str | None = None
    prompt_lookup: bool = False
    policy: dict[str, Any] | None = None  # the policy document (specd.api.policy.Policy)
    max_slots: int = Field(8, ge=1, le=1024)
    max_queue: int = Field(64, ge=0)
    max_context: int = Field(1024, ge=64)
    device: str = "cpu"
    dtype: str = "float32"
    threads: int | None = Field(None, ge=1, description="OMP_NUM_THREADS for the process")
    extra_args: list[str] = Field(default_factory=list)

    @field_validator("policy")
    @classmethod
    def _policy(cls, value: dict[str, Any] | None) -> dict[str, Any] | None:
        if value is not None:
            from specd.api.policy import Policy

            try:  # a bad policy is refused here, not when the server starts
                Policy.model_validate(value)
            except ValidationError as exc:
                e = exc.errors()[0]
                where = ".".join(str(p) for p in e.get("loc", ()))
                raise ValueError(f"{where + ': ' if where else ''}"
                                 f"{e.get('msg', '').removeprefix('Value error, ')}") from None
        return value


class GroupSpec(_Strict):
    """One group: ``serve`` (the pilot starts it) or ``endpoint`` (an existing server)."""

    description: str = ""
    serve: ServeSettings | None = None
    endpoint: str | None = None  # base URL, e.g. http://10.0.0.5:8000
    model: str | None = None  # the model id to send (default: the first of /v1/models)
    pid: int | None = Field(None, ge=1, description="an endpoint's local process, for RSS")

    @model_validator(mode="after")
    def _one_kind(self) -> GroupSpec:
        if (self.serve is None) == (self.endpoint is None):
            raise ValueError("give exactly one of 'serve' or 'endpoint'")
        if self.endpoint is not None and not self.endpoint.startswith(("http://", "https://")):
            raise ValueError("endpoint must be an http:// or https:// URL")
        return self


class OutputLengths(_Strict):
    """Output length (max_tokens) per request: uniform integers in [min, max]."""

    min: int = Field(32, ge=1)
    max: int = Field(64, ge=1)

    @model_validator(mode="after")
    def _order(self) -> OutputLengths:
        if self.min > self.max:
            raise ValueError("min must be <= max")
        return self


class TaskGroupSpec(_Strict):
    """A task group's prompts: rows of a JSONL prompt file with this ``task_group``."""

    prompts: str | None = None  # JSONL (worker/bench format); default: the packaged set
    select: str | None = None  # the file's task_group value (default: the group's name)
    output: OutputLengths = Field(default_factory=OutputLengths)  # type: ignore[arg-type]
    weight: float = Field(1.0, gt=0)


class SLO(_Strict):
    """A request meets the SLO when every bound holds; attainment is the target share."""

    ttft_s: float = Field(gt=0)
    tpot_s: float = Field(gt=0)
    e2e_s: float = Field(gt=0)
    attainment: float = Field(0.9, gt=0, le=1)
    timeout_s: float = Field(60.0, gt=0)

    @model_validator(mode="after")
    def _possible(self) -> SLO:
        for name in ("ttft_s", "tpot_s", "e2e_s", "timeout_s"):
            if not math.isfinite(getattr(self, name)):
                raise ValueError(f"{name} must be finite")
        if self.e2e_s < self.ttft_s:
            raise ValueError(f"impossible SLO: e2e_s {self.e2e_s} is below ttft_s "
                             f"{self.ttft_s} (the end-to-end time includes the first token)")
        if self.timeout_s < self.e2e_s:
            raise ValueError(f"impossible SLO: timeout_s {self.timeout_s} is below e2e_s "
                             f"{self.e2e_s} (requests would be cut off before they can "
                             "meet it)")
        return self


class Capacity(_Strict):
    """The sweep: rates from ``start_rate`` times ``growth`` per step while the SLO holds,
    then ``refine`` bisection steps between the last good and the first bad rate."""

    start_rate: float = Field(0.5, gt=0)
    growth: float = Field(1.6, gt=1)
    max_steps: int = Field(6, ge=1, le=30)
    refine: int = Field(1, ge=0, le=5)
    duration_s: float = Field(20.0, gt=0)
    warmup_s: float = Field(3.0, ge=0)


class TraceSpec(_Strict):
    """One arrival trace. ``load`` is the mean rate as a fraction of G0's measured capacity
    (or ``rate`` in requests/s). Kinds: poisson; gamma (``burstiness`` = the gamma shape,
    below 1 is burstier than Poisson); onoff (Poisson bursts: ``on_s`` on, ``off_s`` idle,
    the same mean rate); replay (``file``: Azure LLM inference or BurstGPT CSV, scaled to
    the mean rate)."""

    name: str = Field(pattern=r"^[a-z][a-z0-9_-]*$")
    kind: Literal["poisson", "gamma", "onoff", "replay"] = "poisson"
    load: float | None = Field(None, gt=0, le=5)
    rate: float | None = Field(None, gt=0)
    duration_s: float = Field(30.0, gt=0)
    warmup_s: float = Field(5.0, ge=0)
    burstiness: float = Field(1.0, gt=0)
    on_s: float = Field(5.0, gt=0)
    off_s: float = Field(5.0, ge=0)
    file: str | None = None
    role: Literal["flat", "peak", "burst", "other"] = "other"

    @model_validator(mode="after")
    def _rate(self) -> TraceSpec:
        if (self.load is None) == (self.rate is None):
            raise ValueError("give exactly one of 'load' (fraction of G0 capacity) or 'rate'")
        if self.kind == "replay" and not self.file:
            raise ValueError("a replay trace needs 'file'")
        if self.kind != "replay" and self.file:
            raise ValueError("'file' is only for kind: replay")
        if self.kind == "gamma" and self.role == "burst" and self.burstiness >= 1:
            raise ValueError("a burst trace needs burstiness below 1 (gamma shape)")
        return self


class Regression(_Strict):
    prompts_per_task_group: int = Field(3, ge=0, le=16)
    max_tokens: int = Field(32, ge=4, le=256)
    near_tie_gap: float = Field(0.1, ge=0)
    cancel_after_chunks: int = Field(3, ge=1)


class Pilot(_Strict):
    name: str = "pilot"
    seed: int = 0
    repeats: int = Field(3, ge=1, le=20)
    window_s: float = Field(10.0, gt=0)
    groups: dict[str, GroupSpec]
    task_groups: dict[str, TaskGroupSpec]
    slo: SLO
    capacity: Capacity = Field(default_factory=Capacity)  # type: ignore[arg-type]
    traces: list[TraceSpec] = Field(min_length=1)
    regression: Regression = Field(default_factory=Regression)  # type: ignore[arg-type]
    parallel_start: bool = False  # start the serve groups at once (faster; cold starts overlap)
    equal_resource_note: str = ""  # the G2 accounting, in the owner's words (report adds ours)
    base_dir: str = "."  # where relative paths resolve (set by load_pilot)

    @field_validator("groups")
    @classmethod
    def _groups(cls, value: dict[str, GroupSpec]) -> dict[str, GroupSpec]:
        if sorted(value) != sorted(GROUPS):
            raise ValueError(f"must be exactly {', '.join(GROUPS)} "
                             f"(got {', '.join(sorted(value)) or 'none'})")
        return value

    @field_validator("task_groups")
    @classmethod
    def _task_groups(cls, value: dict[str, TaskGroupSpec]) -> dict[str, TaskGroupSpec]:
        if not value:
            raise ValueError("at least one task group")
        return value

    @field_validator("traces")
    @classmethod
    def _traces(cls, value: list[TraceSpec]) -> list[TraceSpec]:
        names = [t.name for t in value]
        if len(set(names)) != len(names):
            raise ValueError("trace names must be unique")
        return value

    @model_validator(mode="after")
    def _shape(self) -> Pilot:
        longest = max(t.output.max for t in self.task_groups.values())
        for g, spec in self.groups.items():
            if spec.serve is not None and longest + 16 > spec.serve.max_context:
                raise ValueError(f"groups.{g}.serve.max_context {spec.serve.max_context} "
                                 f"cannot hold outputs of {longest} tokens plus a prompt")
        return self

    def path(self, relative: str) -> Path:
        p = Path(relative)
        return p if p.is_absolute() else Path(self.base_dir) / p

    def repeats_ok(self) -> bool:
        return self.repeats >= 3


def _loc(error: Any) -> str:
    return ".".join(str(p) for p in error.get("loc", ()) if p not in ("function-after",))


def parse_pilot(data: Any, base_dir: str | Path = ".") -> Pilot:
    """Validate a pilot document; PilotError names every refused field."""
    if not isinstance(data, dict):
        raise PilotError("the pilot file must be a mapping")
    try:
        pilot = Pilot.model_validate({**data, "base_dir": str(base_dir)})
    except ValidationError as exc:
        lines = []
        for e in exc.errors():
            where = _loc(e)
            msg = e.get("msg", "").removeprefix("Value error, ")
            if not where:  # a cross-field check: its message starts with the field's path
                lines.append(msg)
                continue
            if e.get("type") == "extra_forbidden":
                msg = "unknown key"
            lines.append(f"{where}: {msg}")
        raise PilotError("pilot file refused:\n  " + "\n  ".join(lines)) from None
    for name, tg in pilot.task_groups.items():
        if tg.prompts and not pilot.path(tg.prompts).is_file():
            raise PilotError(f"task_groups.{name}.prompts: file not found: {tg.prompts}")
    for i, t in enumerate(pilot.traces):
        if t.file and not pilot.path(t.file).is_file():
            raise PilotError(f"traces.{i}.file: file not found: {t.file}")
    return pilot


def load_pilot(path: str | Path) -> Pilot:
    path = Path(path)
    if not path.is_file():
        raise PilotError(f"pilot file not found: {path}")
    try:
        data = yaml.safe_load(path.read_text(encoding="utf-8"))
    except yaml.YAMLError as exc:
        raise PilotError(f"{path}: not YAML ({exc})") from None
    return parse_pilot(data, path.parent)
