"""PromQL for one service's page, stable and canary side by side (pure).

Time series (range queries, one point per ``Frame.step``, rates over ``Frame.rate``), each
split by track (and, for latency, by task group):

- acceptance:   sum by (track) (rate(specd_accepted_tokens_total{svc}[R])) / ... verified
- tau:          sum by (track) (rate(specd_acceptance_length_sum{svc}[R])) / ..._count
- truncation:   truncated / drafted tokens
- tokens_per_s: sum by (track) (rate(specd_emitted_tokens_total{svc}[R]))
- ttft_p95, tpot_p95: histogram_quantile(0.95, sum by (track, task_group, le) (rate(..._bucket[R])))

Snapshots over the whole window (instant queries):

- position_acceptance: accepted / reached per draft position and track (the conditional
  acceptance of position i given the drafts before it were accepted);
- verify_length: the verify-length histogram's buckets per track (request-rounds);
- phase_seconds: round time per phase (draft, schedule, verify, commit) and track.

A ratio with an empty denominator is NaN or absent: "no data" on the page, never 0.
"""

from __future__ import annotations

import math
from collections.abc import Iterable
from dataclasses import dataclass

from specd.api import metrics as m
from specd.operator.analysis.promql import SERVICE_LABEL

WINDOWS = {"5m": 300, "1h": 3600, "6h": 21600}
POINTS = 60  # per chart, whatever the window
SERIES = ("acceptance", "tau", "truncation", "tokens_per_s", "ttft_p95", "tpot_p95")
SNAPSHOTS = ("position_acceptance", "verify_length", "phase_seconds")


@dataclass(frozen=True)
class Frame:
    window: str  # a key of WINDOWS
    seconds: int
    step: float  # seconds between points
    rate: str  # the rate() range of each point

    @classmethod
    def of(cls, window: str) -> Frame:
        if window not in WINDOWS:
            raise ValueError(f"window must be one of {', '.join(WINDOWS)}, not {window!r}")
        seconds = WINDOWS[window]
        step = seconds / POINTS
        # a rate needs several scrapes inside its range: at least a minute
        return cls(window, seconds, step, f"{int(max(60, 4 * step))}s")


def _selector(namespace: str, service: str) -> str:
    return f'{{namespace="{namespace}", {SERVICE_LABEL}="{service}"}}'


def series_queries(namespace: str, service: str, frame: Frame) -> dict[str, str]:
    sel, r = _selector(namespace, service), frame.rate

    def rate(name: str, by: str = m.LABEL_TRACK) -> str:
        return f"sum by ({by}) (rate({name}{sel}[{r}]))"

    def p95(histogram: str) -> str:
        return (f"histogram_quantile(0.95, sum by ({m.LABEL_TRACK}, {m.LABEL_TASK_GROUP}, le) "
                f"(rate({histogram}_bucket{sel}[{r}])))")

    return {
        "acceptance": f"{rate(f'{m.ACCEPTED_TOKENS}_total')} / "
                      f"{rate(f'{m.VERIFIED_TOKENS}_total')}",
        "tau": f"{rate(f'{m.ACCEPTANCE_LENGTH}_sum')} / {rate(f'{m.ACCEPTANCE_LENGTH}_count')}",
        "truncation": f"{rate(f'{m.TRUNCATED_TOKENS}_total')} / "
                      f"{rate(f'{m.DRAFTED_TOKENS}_total')}",
        "tokens_per_s": rate(f"{m.EMITTED_TOKENS}_total"),
        "ttft_p95": p95(m.TIME_TO_FIRST_TOKEN_SECONDS),
        "tpot_p95": p95(m.TIME_PER_OUTPUT_TOKEN_SECONDS),
    }


def snapshot_queries(namespace: str, service: str, frame: Frame) -> dict[str, str]:
    sel, w = _selector(namespace, service), f"{frame.seconds}s"

    def increase(name: str, by: str) -> str:
        return f"sum by ({by}) (increase({name}{sel}[{w}]))"

    by_position = f"{m.LABEL_TRACK}, {m.LABEL_POSITION}"
    return {
        "position_acceptance": f"{increase(f'{m.ACCEPTED_PER_POSITION}_total', by_position)} / "
                               f"{increase(f'{m.REACHED_PER_POSITION}_total', by_position)}",
        "verify_length": increase(f"{m.VERIFY_LENGTH}_bucket", f"{m.LABEL_TRACK}, le"),
        "phase_seconds": increase(f"{m.ROUND_PHASE_SECONDS}_sum",
                                  f"{m.LABEL_TRACK}, {m.LABEL_PHASE}"),
    }


Series = dict[tuple[str, ...], list[tuple[float, float]]]


def split(matrix: Iterable[tuple[dict[str, str], list[tuple[float, float]]]],
          by: tuple[str, ...]) -> Series:
    """A range result keyed by the ``by`` labels' values; NaN and infinite points (empty
    denominators) are dropped, so a gap reads as no data."""
    out: Series = {}
    for labels, points in matrix:
        kept = [(t, v) for t, v in points if math.isfinite(v)]
        if kept:
            out.setdefault(tuple(labels.get(label, "") for label in by), []).extend(kept)
    return {k: sorted(v) for k, v in out.items()}


def keyed(vector: Iterable[tuple[dict[str, str], float]],
          by: tuple[str, ...]) -> dict[tuple[str, ...], float]:
    """An instant result keyed by the ``by`` labels' values, finite values only."""
    return {tuple(labels.get(label, "") for label in by): value
            for labels, value in vector if math.isfinite(value)}


def phase_shares(seconds: dict[tuple[str, ...], float]) -> dict[str, dict[str, float]]:
    """track -> phase -> share of its round time (a track with no round time is absent)."""
    totals: dict[str, float] = {}
    for (track, _phase), value in seconds.items():
        totals[track] = totals.get(track, 0.0) + value
    return {track: {phase: value / totals[track]
                    for (t, phase), value in seconds.items() if t == track}
            for track in totals if totals[track] > 0}


def verify_length_counts(buckets: dict[tuple[str, ...], float]) -> dict[str, dict[str, float]]:
    """track -> verify length bucket ("<= le") -> request-rounds in that bucket alone (the
    histogram's cumulative counts differenced)."""
    out: dict[str, dict[str, float]] = {}
    for track in sorted({t for t, _ in buckets}):
        edges = sorted(((float(le), count) for (t, le), count in buckets.items()
                        if t == track), key=lambda e: e[0])
        previous = 0.0
        counts: dict[str, float] = {}
        for le, cumulative in edges:
            label = "+Inf" if math.isinf(le) else f"{le:g}"
            counts[label] = max(0.0, cumulative - previous)
            previous = cumulative
        if sum(counts.values()) > 0:
            out[track] = counts
    return out
