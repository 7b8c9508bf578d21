"""The verification policy document: what a worker runs with, hot-reloaded from its ConfigMap.

The operator writes it (JSON) into the track's ConfigMap under ``POLICY_KEY``; the worker
reads it from the mounted file, validates it with ``Policy``, and swaps it in between rounds.
``groups`` overrides settings per task group (a pin, or the tuner's choice): the engine runs
each request with ``Policy.for_group(its group)`` inside one shared batch.
"""

from __future__ import annotations

import hashlib
import json
from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

from specd.api.metrics import TASK_GROUPS

POLICY_KEY = "policy.json"

PolicyMode = Literal["plain", "fixed", "scheduled"]


class Calibration(BaseModel):
    """Post-hoc correction of the drafter's confidences: c' = sigmoid(logit(c) / T_i + b_i)."""

    model_config = ConfigDict(extra="forbid")

    temperature: list[float] = Field(default_factory=list,
                                     description="per-position temperature (empty: 1.0)")
    bias: list[float] = Field(default_factory=list, description="per-position bias (empty: 0.0)")


class Policy(BaseModel):
    """Verification settings. ``mode``: plain (no speculation), fixed (verify min(K, L) for
    every request: Scheme A), scheduled (confidence-scheduled global budget: Scheme B)."""

    model_config = ConfigDict(extra="forbid")

    mode: PolicyMode = "scheduled"
    k_max: int = Field(3, ge=1, le=16, description="drafted tokens per request per round")
    fixed_length: int = Field(3, ge=1, le=16, description="verify length in fixed mode")
    min_verify: int = Field(0, ge=0, le=16, description="per-request floor in scheduled mode")
    max_verify: int = Field(8, ge=1, le=16, description="per-request cap in scheduled mode")
    # 0 by default: the step-cost table already prices every draft, and a floor cut drafts
    # that cost nothing to verify where the forward's cost is flat (docs/bench/RESULTS.md)
    survival_floor: float = Field(0.0, ge=0.0, le=1.0,
                                  description="never verify positions with S(r,i) below this")
    max_batch_tokens: int = Field(512, ge=1, description="token budget of one verify forward")
    calibration: Calibration = Field(default_factory=Calibration)
    plain_rounds: float = Field(
        0.0, ge=0.0, le=0.5, description="share of decode rounds without a prefill chunk decoded "
        "plain for every request: the true-plain reference (same workers, same batches) the "
        "tuner compares against")
    groups: dict[str, GroupPolicy] = Field(
        default_factory=dict, description="per-task-group overrides of the settings above")

    @model_validator(mode="after")
    def _bounds(self) -> Policy:
        _check_bounds(self)
        unknown = sorted(set(self.groups) - set(TASK_GROUPS))
        if unknown:
            raise ValueError(f"groups: unknown task group {unknown[0]!r} "
                             f"(one of {', '.join(TASK_GROUPS)})")
        for name in self.groups:
            try:
                self.for_group(name)
            except ValueError as exc:
                raise ValueError(f"groups.{name}: {exc}") from None
        return self

    def for_group(self, group: str) -> Policy:
        """The settings a request of ``group`` runs with: this policy, the group's overrides
        applied (the policy itself when the group has none). A group that lowers ``k_max``
        or ``max_verify`` without setting ``fixed_length`` or ``min_verify`` gets those
        clamped to fit (an explicit value out of bounds is an error)."""
        override = self.groups.get(group)
        if override is None:
            return self
        own = override.model_dump(exclude_none=True)
        fields = {**self.model_dump(exclude={"groups"}), **own}  # plain_rounds: the batch's
        if "fixed_length" not in own:
            fields["fixed_length"] = min(fields["fixed_length"], fields["k_max"])
        if "min_verify" not in own:
            fields["min_verify"] = min(fields["min_verify"], fields["max_verify"])
        effective = Policy.model_construct(**{**fields, "calibration": Calibration(
            **fields["calibration"])})
        _check_bounds(effective)
        return effective

    def document(self) -> dict[str, Any]:
        """The JSON document; ``groups`` and ``plain_rounds`` only when set, so that
        documents written before they existed keep their version."""
        doc = self.model_dump(mode="json", exclude={"groups"} | (
            {"plain_rounds"} if not self.plain_rounds else set()))
        if self.groups:
            doc["groups"] = {name: override.model_dump(mode="json", exclude_none=True)
                             for name, override in sorted(self.groups.items())}
        return doc

    def version(self) -> str:
        """A short content hash: the policy version reported as a metric label."""
        canonical = json.dumps(self.document(), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]


class GroupPolicy(BaseModel):
    """One task group's overrides; a field left out keeps the policy's value."""

    model_config = ConfigDict(extra="forbid")

    mode: PolicyMode | None = None
    k_max: int | None = Field(None, ge=1, le=16)
    fixed_length: int | None = Field(None, ge=1, le=16)
    min_verify: int | None = Field(None, ge=0, le=16)
    max_verify: int | None = Field(None, ge=1, le=16)
    survival_floor: float | None = Field(None, ge=0.0, le=1.0)
    calibration: Calibration | None = None


def _check_bounds(policy: Policy) -> None:
    if policy.min_verify > policy.max_verify:
        raise ValueError("min_verify must be <= max_verify")
    if policy.fixed_length > policy.k_max:
        raise ValueError("fixed_length must be <= k_max")


def parse_policy(text: str) -> Policy:
    """Parse and validate a policy document (raises pydantic.ValidationError or ValueError)."""
    return Policy.model_validate_json(text)


Policy.model_rebuild()
