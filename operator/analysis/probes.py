"""Lossless probes, judged (pure): the same greedy prompts on a canary and a stable pod.

Speculative decoding must not change greedy output, whatever the drafter, the policy or the
load: a canary that answers a probe differently from the stable track serves another target
(a changed model, quantisation or tokenizer) or has a verifier bug, and fails the step. Two
correct workers may still part where the target's two best tokens are a numeric near-tie --
another kernel, dtype or batch shape rounds them the other way round -- so each worker
reports, per output position, its target's top-1 and top-2 tokens and their logit gap from a
plain teacher-forced forward (``POST /specd/v1/probe``). At the first position where the two
outputs part (their prefixes are equal up to there, so both targets saw the same context):

- near-tie: each side's token is the other side's runner-up and both gaps are below
  ``near_tie_gap`` -> the probe passes (what follows is not comparable: the contexts differ);
- anything else -> a real difference: Failed, naming the probe, the position and both tokens.

Each side must also be its own target's greedy choice at every position (token == top-1, or
a near-tie): a canary that is not fails even when the stable track happens to agree with it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Literal

from specd.operator.analysis.judge import Result

METRIC = "losslessProbe"
NAME = "lossless"


@dataclass(frozen=True)
class ProbeAnswer:
    """One pod's answer to one probe prompt."""

    token_ids: list[int]
    top1: list[int]
    top2: list[int]
    gap: list[float]
    tokens: list[str] | None = None  # decoded, for messages

    def text(self, i: int) -> str:
        shown = self.tokens[i] if self.tokens and i < len(self.tokens) else ""
        return f"{self.token_ids[i]} {shown!r}" if i < len(self.token_ids) else "end"

    @classmethod
    def from_json(cls, raw: dict) -> ProbeAnswer:
        return cls([int(t) for t in raw["token_ids"]], [int(t) for t in raw["top1"]],
                   [int(t) for t in raw["top2"]], [float(g) for g in raw["gap"]],
                   [str(t) for t in raw.get("tokens") or []] or None)


Outcome = Literal["identical", "near-tie", "different", "inconsistent"]


@dataclass(frozen=True)
class ProbeComparison:
    probe: int
    outcome: Outcome
    position: int | None = None
    detail: str = ""


def _inconsistent(answer: ProbeAnswer, tie: float) -> int | None:
    """The first position where ``answer`` is not its own target's greedy choice."""
    for i, (token, top1, gap) in enumerate(zip(answer.token_ids, answer.top1, answer.gap,
                                               strict=False)):
        if token != top1 and gap >= tie:
            return i
    return None


def compare(probe: int, stable: ProbeAnswer, canary: ProbeAnswer,
            near_tie_gap: float) -> ProbeComparison:
    """One probe prompt: identical, a near-tie divergence, or a real difference."""
    bad = _inconsistent(canary, near_tie_gap)
    if bad is not None:
        return ProbeComparison(probe, "inconsistent", bad,
                               f"the canary's token {canary.text(bad)} at position {bad} is "
                               f"not its own target's greedy choice {canary.top1[bad]} "
                               f"(gap {canary.gap[bad]:.3g})")
    length = min(len(stable.token_ids), len(canary.token_ids))
    at = next((i for i in range(length) if stable.token_ids[i] != canary.token_ids[i]), None)
    if at is None:
        if len(stable.token_ids) == len(canary.token_ids):
            return ProbeComparison(probe, "identical")
        at = length  # one side stopped (EOS) where the other went on
        return ProbeComparison(probe, "different", at,
                               f"outputs part at position {at}: stable {stable.text(at)}, "
                               f"canary {canary.text(at)}")
    a, b = stable.token_ids[at], canary.token_ids[at]
    gaps = (stable.gap[at], canary.gap[at])
    near = (stable.top2[at] == b and canary.top2[at] == a
            and max(gaps) < near_tie_gap)
    shown = (f"position {at}: stable {stable.text(at)} (gap {gaps[0]:.3g}), "
             f"canary {canary.text(at)} (gap {gaps[1]:.3g})")
    if near:
        return ProbeComparison(probe, "near-tie", at, f"a near-tie at {shown}")
    return ProbeComparison(probe, "different", at, f"outputs differ at {shown}")


def judge(stable: Sequence[ProbeAnswer], canary: Sequence[ProbeAnswer], near_tie_gap: float,
          where: str = "") -> Result:
    """Every probe prompt compared -> one Result (Failed on the first real difference)."""
    def result(verdict: str, message: str, value: float | None = None) -> Result:
        return Result(NAME, METRIC, None, verdict, f"{NAME}: {message}{where}",  # type: ignore[arg-type]
                      value=value)

    if not stable or len(stable) != len(canary):
        return result("Inconclusive", f"{len(canary)} canary and {len(stable)} stable "
                                      "answers: nothing to compare")
    found = [compare(i, s, c, near_tie_gap)
             for i, (s, c) in enumerate(zip(stable, canary, strict=True))]
    failed = [f for f in found if f.outcome in ("different", "inconsistent")]
    if failed:
        first = failed[0]
        more = f" (+{len(failed) - 1} more)" if len(failed) > 1 else ""
        return result("Failed", f"probe {first.probe}: {first.detail}{more}",
                      1 - len(failed) / len(found))
    ties = [f for f in found if f.outcome == "near-tie"]
    note = (f"; {len(ties)} parted at a numeric near-tie (probe {ties[0].probe}, "
            f"{ties[0].detail})") if ties else ""
    return result("Successful", f"{len(found)} probes give the stable track's greedy "
                                f"tokens{note}", 1.0)
