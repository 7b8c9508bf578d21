"""What one engine round did, as plain records: the core fills a ``RoundStats`` as the round
commits and hands it to the metrics exporter (``exporter.RoundExporter``) in one place, as
vLLM keeps ``SpecDecodingStats`` apart from its Prometheus logger.

Timings: ``phases`` are the exported round phases (``specd.api.metrics.PHASES``: draft,
schedule, verify, commit); ``parts`` split them finer for the per-round breakdown
(``specd bench rounds``, ``worker/bench/round_breakdown.py``): gate, draft, schedule,
forward, accept, commit.
"""

from __future__ import annotations

from dataclasses import dataclass, field

from specd.api.policy import Calibration
from specd.worker.engine.scheduler import calibrate


@dataclass
class GroupCounts:
    """One task group's decoding rows in a round."""

    drafted: int = 0
    verified: int = 0
    accepted: int = 0
    emitted: int = 0
    rows: int = 0


@dataclass
class PositionCounts:
    """One task group's counts by draft position (index 0: the first draft token).

    verified: rows that verified the position; reached: verified with every draft before it
    accepted (where conditional acceptance and the predicted confidence compare); predicted:
    the scheduler's calibrated confidence summed over reached positions."""

    verified: list[float] = field(default_factory=list)
    reached: list[float] = field(default_factory=list)
    accepted: list[float] = field(default_factory=list)
    predicted: list[float] = field(default_factory=list)

    def add(self, confidence: list[float], calibration: Calibration, verified: int,
            accepted: int) -> None:
        while len(self.verified) < verified:
            for column in (self.verified, self.reached, self.accepted, self.predicted):
                column.append(0.0)
        predicted = calibrate(confidence[:verified], calibration)
        for i in range(verified):
            self.verified[i] += 1
        for i in range(min(accepted + 1, verified)):
            self.reached[i] += 1
            self.predicted[i] += predicted[i]
        for i in range(accepted):
            self.accepted[i] += 1


@dataclass(frozen=True)
class RequestRound:
    """One decoding request's part of a round."""

    group: str
    verified: int
    accepted: int
    counted: bool  # in the per-request metrics (probe requests are not)


@dataclass
class RoundStats:
    kind: str  # "speculative" (the drafter ran) | "plain"
    rows: int  # decoding requests
    prefill_tokens: int = 0  # prompt tokens of newcomers in the same forward
    phases: dict[str, float] = field(default_factory=dict)
    parts: dict[str, float] = field(default_factory=dict)
    groups: dict[str, GroupCounts] = field(default_factory=dict)
    positions: dict[str, PositionCounts] = field(default_factory=dict)
    requests: list[RequestRound] = field(default_factory=list)

    @property
    def seconds(self) -> float:
        return sum(self.phases.values())

    @property
    def verified(self) -> int:
        """Drafted tokens the round's forward verified."""
        return sum(r.verified for r in self.requests)

    @property
    def emitted(self) -> int:
        """Tokens the round committed, over every group."""
        return sum(c.emitted for c in self.groups.values())

    @property
    def verified_requests(self) -> int:
        return sum(1 for r in self.requests if r.verified > 0)

    def add_request(self, group: str, drafted: int, verified: int, accepted: int,
                    counted: bool) -> None:
        c = self.groups.setdefault(group, GroupCounts())
        c.drafted += drafted
        c.verified += verified
        c.accepted += accepted
        c.emitted += accepted + 1
        c.rows += 1
        self.requests.append(RequestRound(group, verified, accepted, counted))
