"""Seeded arrival schedules: the same times, prompts and output lengths for every group.

Kinds (``rate`` is the mean arrival rate in requests/s):

- ``poisson``: exponential gaps (coefficient of variation 1);
- ``gamma``: gamma gaps of shape ``burstiness`` and mean 1/rate (vLLM's serving benchmark's
  convention): CV^2 = 1/burstiness, so a shape below 1 is burstier than Poisson;
- ``onoff``: Poisson bursts at rate * (on + off) / on during ``on_s``, silence for ``off_s``;
- ``replay``: a trace file's timestamps (Azure LLM inference traces: TIMESTAMP,
  ContextTokens, GeneratedTokens; BurstGPT: Timestamp, Request tokens, Response tokens)
  scaled so its mean rate is the target, with its output lengths (clipped to the task
  group's range) and its input lengths mapped by quantile onto the real prompts.

Arrivals before ``warmup_s`` are sent (they warm the server) but excluded from the figures,
and counted apart.
"""

from __future__ import annotations

import bisect
import csv
import math
import random
from dataclasses import asdict, dataclass
from datetime import datetime
from pathlib import Path

from specd.pilot.config import Pilot, PilotError, TraceSpec
from specd.pilot.prompts import Prompt


@dataclass(frozen=True)
class Arrival:
    t: float  # seconds after the trace starts
    task_group: str
    prompt: int  # index into the task group's prompts
    max_tokens: int
    warmup: bool

    def to_json(self) -> dict:
        return asdict(self)


def poisson_times(rate: float, duration: float, rng: random.Random) -> list[float]:
    out: list[float] = []
    t = 0.0
    while True:
        t += rng.expovariate(rate)
        if t >= duration:
            return out
        out.append(t)


def gamma_times(rate: float, shape: float, duration: float, rng: random.Random) -> list[float]:
    scale = 1.0 / (rate * shape)  # mean gap shape * scale = 1 / rate
    out: list[float] = []
    t = 0.0
    while True:
        t += rng.gammavariate(shape, scale)
        if t >= duration:
            return out
        out.append(t)


def onoff_times(rate: float, on_s: float, off_s: float, duration: float,
                rng: random.Random) -> list[float]:
    """Poisson at the burst rate inside each on-period; the mean over a cycle is ``rate``."""
    burst = rate * (on_s + off_s) / on_s
    out: list[float] = []
    start = 0.0
    while start < duration:
        t = start
        end = min(start + on_s, duration)
        while True:
            t += rng.expovariate(burst)
            if t >= end:
                break
            out.append(t)
        start += on_s + off_s
    return out


_TIME = ("timestamp", "time", "arrival_time")
_INPUT = ("contexttokens", "request tokens", "request_tokens", "input_tokens", "prompt_tokens",
          "input_length")
_OUTPUT = ("generatedtokens", "response tokens", "response_tokens", "output_tokens",
           "completion_tokens", "output_length")


def _seconds(value: str) -> float:
    try:
        return float(value)
    except ValueError:
        pass
    text = value.strip().replace("T", " ")
    if "." in text:  # Azure's 7-digit fractions: keep microseconds
        head, frac = text.split(".", 1)
        digits = "".join(c for c in frac if c.isdigit())
        text = f"{head}.{digits[:6]}"
    try:
        return datetime.fromisoformat(text).timestamp()
    except ValueError as exc:
        raise ValueError(f"not a timestamp: {value!r}") from exc


@dataclass(frozen=True)
class TraceRecord:
    t: float
    input_tokens: int
    output_tokens: int


def read_trace_file(path: str | Path, where: str = "trace file") -> list[TraceRecord]:
    """Azure LLM inference / BurstGPT CSV -> records sorted by time (t from 0)."""
    path = Path(path)
    with path.open(newline="", encoding="utf-8") as fh:
        reader = csv.DictReader(fh)
        fields = {(f or "").strip().lower(): f for f in reader.fieldnames or []}

        def column(options: tuple[str, ...]) -> str:
            for o in options:
                if o in fields:
                    return fields[o]
            raise PilotError(f"{where}: {path} has none of the columns {', '.join(options)} "
                             f"(has {', '.join(fields)})")

        tc, ic, oc = column(_TIME), column(_INPUT), column(_OUTPUT)
        records = []
        for n, row in enumerate(reader, start=2):
            try:
                records.append(TraceRecord(_seconds(row[tc]), int(float(row[ic])),
                                           int(float(row[oc]))))
            except (ValueError, TypeError) as exc:
                raise PilotError(f"{where}: {path}:{n}: {exc}") from None
    if len(records) < 2:
        raise PilotError(f"{where}: {path} needs at least two requests")
    records.sort(key=lambda r: r.t)
    t0 = records[0].t
    return [TraceRecord(r.t - t0, r.input_tokens, r.output_tokens) for r in records]


def scale_records(records: list[TraceRecord], rate: float, duration: float) -> list[TraceRecord]:
    """Stretch or squeeze time so the mean rate is ``rate``; keep what falls in ``duration``
    (the file repeats end to end if it is too short)."""
    span = records[-1].t - records[0].t
    if span <= 0:
        raise PilotError("trace file: every request has the same timestamp")
    observed = (len(records) - 1) / span
    factor = observed / rate
    period = span * factor + 1.0 / rate
    out: list[TraceRecord] = []
    offset = 0.0
    while offset < duration:
        for r in records:
            t = offset + r.t * factor
            if t >= duration:
                return out
            out.append(TraceRecord(t, r.input_tokens, r.output_tokens))
        offset += period
    return out


def trace_seed(seed: int, name: str, repeat: int) -> str:
    return f"{seed}:{name}:{repeat}"


def build_schedule(pilot: Pilot, trace: TraceSpec, rate: float, prompts: dict[str, list[Prompt]],
                   repeat: int = 0) -> list[Arrival]:
    """The arrivals of one trace at ``rate`` (warm-up first), seeded by (seed, trace, repeat)."""
    rng = random.Random(trace_seed(pilot.seed, trace.name, repeat))
    total = trace.warmup_s + trace.duration_s
    records: list[TraceRecord] | None = None
    if trace.kind == "poisson":
        times = poisson_times(rate, total, rng)
    elif trace.kind == "gamma":
        times = gamma_times(rate, trace.burstiness, total, rng)
    elif trace.kind == "onoff":
        times = onoff_times(rate, trace.on_s, trace.off_s, total, rng)
    else:
        assert trace.file
        records = scale_records(read_trace_file(pilot.path(trace.file), f"traces.{trace.name}"),
                                rate, total)
        times = [r.t for r in records]
    names = list(pilot.task_groups)
    weights = [pilot.task_groups[n].weight for n in names]
    sorted_inputs = sorted(r.input_tokens for r in records) if records else []
    arrivals = []
    for i, t in enumerate(times):
        group = rng.choices(names, weights)[0]
        spec = pilot.task_groups[group]
        pool = prompts[group]
        if records is not None:
            r = records[i]
            q = bisect.bisect_left(sorted_inputs, r.input_tokens) / max(1, len(sorted_inputs))
            by_size = sorted(range(len(pool)), key=lambda k: pool[k].approx_tokens())
            prompt = by_size[min(len(pool) - 1, int(q * len(pool)))]
            max_tokens = min(max(r.output_tokens, spec.output.min), spec.output.max)
        else:
            prompt = rng.randrange(len(pool))
            max_tokens = rng.randint(spec.output.min, spec.output.max)
        arrivals.append(Arrival(round(t, 6), group, prompt, max_tokens, t < trace.warmup_s))
    return arrivals


def capacity_schedule(pilot: Pilot, rate: float, prompts: dict[str, list[Prompt]]) -> list[Arrival]:
    """A Poisson step of the capacity sweep (the same for every group at the same rate)."""
    cap = pilot.capacity
    spec = TraceSpec(name=f"capacity-{rate:.4g}".replace(".", "_"), kind="poisson", rate=rate,
                     duration_s=cap.duration_s, warmup_s=cap.warmup_s)
    return build_schedule(pilot, spec, rate, prompts, 0)


def inter_arrival_stats(times: list[float]) -> tuple[float, float]:
    """(mean rate, squared coefficient of variation of the gaps)."""
    gaps = [b - a for a, b in zip([0.0, *times[:-1]], times, strict=True)]
    mean = sum(gaps) / len(gaps)
    var = sum((g - mean) ** 2 for g in gaps) / (len(gaps) - 1)
    return 1.0 / mean, var / (mean * mean)


def dispersion_index(times: list[float], duration: float, bin_s: float) -> float:
    """Variance over mean of arrivals per bin (1 for Poisson, above 1 for bursts)."""
    bins = [0] * max(1, math.floor(duration / bin_s))
    for t in times:
        k = int(t / bin_s)
        if k < len(bins):
            bins[k] += 1
    mean = sum(bins) / len(bins)
    var = sum((b - mean) ** 2 for b in bins) / (len(bins) - 1)
    return var / mean if mean else 0.0
