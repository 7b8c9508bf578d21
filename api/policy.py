"""The verification policy document: what a worker runs with, hot-reloaded from its ConfigMap.

The operator writes it (JSON) into the track's ConfigMap under ``POLICY_KEY``; the worker
reads it from the mounted file, validates it with ``Policy``, and swaps it in between rounds.
"""

from __future__ import annotations

import hashlib
import json
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, model_validator

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
    k_max: int = Field(5, ge=1, le=16, description="drafted tokens per request per round")
    fixed_length: int = Field(4, ge=1, le=16, description="verify length in fixed mode")
    min_verify: int = Field(0, ge=0, le=16, description="per-request floor in scheduled mode")
    max_verify: int = Field(8, ge=1, le=16, description="per-request cap in scheduled mode")
    survival_floor: float = Field(0.05, ge=0.0, le=1.0,
                                  description="never verify positions with S(r,i) below this")
    max_batch_tokens: int = Field(512, ge=1, description="token budget of one verify forward")
    calibration: Calibration = Field(default_factory=Calibration)

    @model_validator(mode="after")
    def _bounds(self) -> Policy:
        if self.min_verify > self.max_verify:
            raise ValueError("min_verify must be <= max_verify")
        if self.fixed_length > self.k_max:
            raise ValueError("fixed_length must be <= k_max")
        return self

    def version(self) -> str:
        """A short content hash: the policy version reported as a metric label."""
        canonical = json.dumps(self.model_dump(mode="json"), sort_keys=True, separators=(",", ":"))
        return hashlib.sha256(canonical.encode()).hexdigest()[:12]


def parse_policy(text: str) -> Policy:
    """Parse and validate a policy document (raises pydantic.ValidationError or ValueError)."""
    return Policy.model_validate_json(text)
