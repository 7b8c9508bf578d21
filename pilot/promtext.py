"""Prometheus text exposition, parsed without prometheus_client, and the per-window round
accounting.

A window's figures are counter differences between two scrapes (names in
``specd.api.metrics``): rounds, drafted / verified / accepted / committed (emitted) tokens,
and the draft / schedule / verify / commit time (``specd_round_phase_seconds_sum``). From
them: the decode time cost per committed token (all round time over committed tokens),
tokens committed per round, and tau. A counter that went down was reset (the server
restarted): the window takes the new value, as Prometheus' ``increase`` does; a failed scrape
leaves a gap that the next good window spans. So the windows' sums reconcile with the
counters: sum of window deltas = last value - first value when nothing was reset.
"""

from __future__ import annotations

import math
import re
from collections.abc import Iterable
from dataclasses import dataclass, field

from specd.api import metrics as m

_SAMPLE = re.compile(r"^([a-zA-Z_:][a-zA-Z0-9_:]*)(\{(.*)\})?\s+(\S+)(\s+\S+)?\s*$")
_LABEL = re.compile(r'([a-zA-Z_][a-zA-Z0-9_]*)="((?:[^"\\]|\\.)*)"')

Sample = tuple[str, dict[str, str], float]

# counter name in the exposition -> our key
COUNTERS = {
    f"{m.ROUNDS}_total": "rounds",
    f"{m.DRAFTED_TOKENS}_total": "drafted",
    f"{m.VERIFIED_TOKENS}_total": "verified",
    f"{m.ACCEPTED_TOKENS}_total": "accepted",
    f"{m.EMITTED_TOKENS}_total": "committed",
    f"{m.ACCEPTANCE_LENGTH}_sum": "tau_sum",
    f"{m.ACCEPTANCE_LENGTH}_count": "tau_count",
}
PHASE_SUM = f"{m.ROUND_PHASE_SECONDS}_sum"
KEYS = (*COUNTERS.values(), *(f"{p}_s" for p in m.PHASES))


def parse(text: str) -> list[Sample]:
    out: list[Sample] = []
    for line in text.splitlines():
        line = line.strip()
        if not line or line.startswith("#"):
            continue
        match = _SAMPLE.match(line)
        if not match:
            continue
        name, _, labels, value = match.group(1), match.group(2), match.group(3), match.group(4)
        try:
            v = float(value)
        except ValueError:
            continue
        out.append((name, dict(_LABEL.findall(labels or "")), v))
    return out


def totals(samples: Iterable[Sample], task_group: str | None = None) -> dict[str, float]:
    """Our counters summed over every label set (or one task group's, where labelled)."""
    out = dict.fromkeys(KEYS, 0.0)
    for name, labels, value in samples:
        if task_group is not None and labels.get(m.LABEL_TASK_GROUP, task_group) != task_group:
            continue
        if name in COUNTERS:
            out[COUNTERS[name]] += value
        elif name == PHASE_SUM and labels.get(m.LABEL_PHASE) in m.PHASES:
            out[f"{labels[m.LABEL_PHASE]}_s"] += value
    return out


def gauge(samples: Iterable[Sample], name: str) -> float | None:
    values = [v for n, _, v in samples if n == name]
    return sum(values) if values else None


def requests_by_outcome(samples: Iterable[Sample]) -> dict[str, float]:
    out: dict[str, float] = {}
    for name, labels, value in samples:
        if name == f"{m.REQUESTS}_total":
            key = labels.get("outcome", "?")
            out[key] = out.get(key, 0.0) + value
    return out


@dataclass
class Window:
    t0: float
    t1: float
    delta: dict[str, float]
    reset: bool = False
    spans_gap: bool = False
    derived: dict[str, float | None] = field(default_factory=dict)

    def to_json(self) -> dict:
        return {"t0": round(self.t0, 3), "t1": round(self.t1, 3), "reset": self.reset,
                "spans_gap": self.spans_gap, **{k: round(v, 6) for k, v in self.delta.items()},
                **{k: (None if v is None else round(v, 6)) for k, v in self.derived.items()}}


def derive(d: dict[str, float]) -> dict[str, float | None]:
    """Round accounting of one window's deltas."""
    decode = sum(d.get(f"{p}_s", 0.0) for p in m.PHASES)
    committed = d.get("committed", 0.0)
    rounds = d.get("rounds", 0.0)

    def ratio(a: float, b: float) -> float | None:
        return a / b if b > 0 and math.isfinite(a) else None

    return {
        "decode_s": decode,
        "cost_per_token_ms": None if committed <= 0 else 1000.0 * decode / committed,
        "tokens_per_round": ratio(committed, rounds),
        "round_ms": None if rounds <= 0 else 1000.0 * decode / rounds,
        "tau": ratio(d.get("tau_sum", 0.0), d.get("tau_count", 0.0)),
        "acceptance": ratio(d.get("accepted", 0.0), d.get("verified", 0.0)),
        "draft_share": ratio(d.get("draft_s", 0.0), decode),
    }


def windows(scrapes: list[tuple[float, str | None]], task_group: str | None = None) -> list[Window]:
    """Per-window deltas between consecutive good scrapes ((t, text or None) in time order)."""
    out: list[Window] = []
    prev: tuple[float, dict[str, float]] | None = None
    gap = False
    for t, text in scrapes:
        if text is None:
            gap = prev is not None
            continue
        now = totals(parse(text), task_group)
        if prev is not None:
            reset = any(now[k] < prev[1][k] - 1e-9 for k in KEYS)
            delta = {k: (now[k] if reset else now[k] - prev[1][k]) for k in KEYS}
            w = Window(prev[0], t, delta, reset, gap)
            w.derived = derive(delta)
            out.append(w)
        prev, gap = (t, now), False
    return out


def summed(ws: Iterable[Window]) -> dict[str, float]:
    out = dict.fromkeys(KEYS, 0.0)
    for w in ws:
        for k in KEYS:
            out[k] += w.delta.get(k, 0.0)
    return out


def steady(ws: list[Window], trim: int = 1) -> list[Window]:
    """The windows without the first and last ``trim`` (ramp-up and drain)."""
    return ws[trim:len(ws) - trim] if len(ws) > 2 * trim else ws
