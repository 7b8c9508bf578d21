"""What the tuner reads from Prometheus: one ``decide.Window`` per task group of a service's
stable track, from the worker's counters (``specd.api.metrics``).

PromQL recipes (``{sel}``: namespace, service, track="stable"; ``W``: the tuning interval):

- finished requests:   sum by (task_group) (increase(specd_requests_total{sel, outcome="finished"}[W]))
- decode work, per group, round kind and batch-size bucket (tokens committed by the group's
  rows; request-seconds = round time x the group's rows):
                       sum by (task_group, round_kind, batch) (increase(specd_decode_tokens_total{sel}[W]))
                       sum by (task_group, round_kind, batch) (increase(specd_decode_seconds_total{sel}[W]))
- draft positions:     sum by (task_group, position) (increase(specd_{accepted,reached,verified,predicted}_per_position_total{sel}[W]))

The true-plain reference. Workers of a tuned service run a share of decode rounds plain for
every request (``policy.plain_rounds``, ``spec.tuning.referenceShare``); the scheduled mode's
own plain rounds count too. In a plain round each request commits one token, so the plain
rate per request at batch bucket b is tokens / request-seconds over plain rounds of any group.
A group's speculative goodput is its tokens / request-seconds over speculative rounds; its
reference is the plain rate of each bucket, weighted by the group's speculative time there
(buckets without a plain measurement are left out of both), so the two compare the same
batch sizes on the same workers over the same window.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass

from specd.api import metrics as m
from specd.operator.analysis.promql import SERVICE_LABEL
from specd.operator.analysis.provider import MetricProvider
from specd.operator.tuner.decide import Window

Vector = list[tuple[dict[str, str], float]]


@dataclass(frozen=True)
class Queries:
    namespace: str
    service: str
    window: str  # a PromQL range, e.g. "5m"

    def _sel(self, extra: str = "") -> str:
        parts = [f'namespace="{self.namespace}"', f'{SERVICE_LABEL}="{self.service}"',
                 'track="stable"']
        return "{" + ", ".join(parts + ([extra] if extra else [])) + "}"

    def _increase(self, name: str, by: str, extra: str = "") -> str:
        return f"sum by ({by}) (increase({name}{self._sel(extra)}[{self.window}]))"

    def all(self) -> dict[str, str]:
        g = m.LABEL_TASK_GROUP
        kind = f"{g}, {m.LABEL_ROUND_KIND}, {m.LABEL_BATCH}"
        position = f"{g}, {m.LABEL_POSITION}"
        return {
            "requests": self._increase(f"{m.REQUESTS}_total", g, 'outcome="finished"'),
            "tokens": self._increase(f"{m.DECODE_TOKENS}_total", kind),
            "seconds": self._increase(f"{m.DECODE_SECONDS}_total", kind),
            "accepted": self._increase(f"{m.ACCEPTED_PER_POSITION}_total", position),
            "reached": self._increase(f"{m.REACHED_PER_POSITION}_total", position),
            "verified": self._increase(f"{m.VERIFIED_PER_POSITION}_total", position),
            "predicted": self._increase(f"{m.PREDICTED_PER_POSITION}_total", position),
        }


def read(provider: MetricProvider, queries: Queries) -> dict[str, Vector]:
    """Every query's vector (raises ``ProviderError`` when Prometheus cannot answer)."""
    return {name: provider.vector(promql) for name, promql in queries.all().items()}


def _by(vector: Vector, *labels: str) -> dict[tuple[str, ...], float]:
    out: dict[tuple[str, ...], float] = {}
    for metric, value in vector:
        key = tuple(metric.get(label, "") for label in labels)
        out[key] = out.get(key, 0.0) + value
    return out


def _positions(vector: Vector, group: str) -> dict[int, float]:
    return {int(p): v for (g, p), v in _by(vector, m.LABEL_TASK_GROUP, m.LABEL_POSITION).items()
            if g == group and p.isdigit()}


def windows(vectors: Mapping[str, Vector], end: float) -> dict[str, Window]:
    """One Window per task group that finished requests in the window."""
    requests = {g: v for (g,), v in _by(vectors["requests"], m.LABEL_TASK_GROUP).items()}
    keys = (m.LABEL_TASK_GROUP, m.LABEL_ROUND_KIND, m.LABEL_BATCH)
    tokens, seconds = _by(vectors["tokens"], *keys), _by(vectors["seconds"], *keys)
    plain_tokens: dict[str, float] = {}
    plain_seconds: dict[str, float] = {}
    for (_g, kind, batch), value in tokens.items():
        if kind == "plain":
            plain_tokens[batch] = plain_tokens.get(batch, 0.0) + value
            plain_seconds[batch] = plain_seconds.get(batch, 0.0) + seconds.get(
                (_g, kind, batch), 0.0)
    plain_rate = {b: plain_tokens[b] / s for b, s in plain_seconds.items() if s > 0}
    out = {}
    for group, finished in requests.items():
        spec_s = {b: s for (g, kind, b), s in seconds.items()
                  if g == group and kind == "speculative" and s > 0}
        spec_t = {b: tokens.get((group, "speculative", b), 0.0) for b in spec_s}
        compared = [b for b in spec_s if b in plain_rate]
        goodput = plain_goodput = None
        if spec_s:
            goodput = sum(spec_t.values()) / sum(spec_s.values())
        if compared:
            weight = sum(spec_s[b] for b in compared)
            goodput = sum(spec_t[b] for b in compared) / weight
            plain_goodput = sum(spec_s[b] * plain_rate[b] for b in compared) / weight
        accepted = _positions(vectors["accepted"], group)
        reached = _positions(vectors["reached"], group)
        verified = _positions(vectors["verified"], group)
        predicted = _positions(vectors.get("predicted", []), group)
        last = max(verified, default=0)
        out[group] = Window(
            end=end, requests=finished, goodput=goodput, plain_goodput=plain_goodput,
            plain_samples=sum(plain_tokens.get(b, 0.0) for b in compared),
            acceptance_by_position=tuple(accepted.get(i, 0.0) / reached[i]
                                         if reached.get(i) else 0.0
                                         for i in range(1, last + 1)),
            verified_by_position=tuple(verified.get(i, 0.0) for i in range(1, last + 1)),
            reached_by_position=tuple(reached.get(i, 0.0) for i in range(1, last + 1)),
            predicted_by_position=tuple(predicted.get(i, 0.0) / reached[i]
                                        if reached.get(i) else 0.0
                                        for i in range(1, last + 1)) if predicted else ())
    return out
