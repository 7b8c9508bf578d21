"""The decision rule, per task group, and the cost arithmetic it rests on.

Decode time cost per committed token = accumulated round time / committed tokens over a
steady window. Worked example: plain decoding 40 ms a token; strategy A 60 ms a round for
3 tokens = 20 ms; strategy B 100 ms a round for 4 tokens = 25 ms, so "more tokens a round"
lost; A at 1.2 tokens a round = 50 ms, slower than plain. End to end, only the decode part
shrinks: 7 s of retrieval and input work plus 3 s of decoding, decoding halved, is
10 s -> 8.5 s, 1.18x.

The rule (written into every report, RULE below): G1 is compared at each trace with the
better of G0 and G2 there (higher mean goodput; a tie goes to the lower median latency).
Repeats are paired (same seed, same arrivals), so the interval is over paired differences.

- better at a trace: goodput gain with its 95 % interval above zero; or, where goodput does
  not separate (its interval spans zero, as it does when every group meets the SLO for every
  request at a light load), a median end-to-end latency gain with its interval above zero;
- burst not worse: G1's p99 end-to-end at the burst trace at most 5 % above the baseline's
  and no goodput loss there (interval below zero);
- adopt (within the tested load range, up to peak) = better at flat and at peak, burst not
  worse, and the business regression passed;
- low-load only = better at flat but not at peak or worse at burst; the crossover load is
  where the median latency gain, interpolated between flat and peak, reaches zero (the flat
  load itself when it does not cross zero by peak);
- reject (do not adopt yet) = otherwise, or whenever the business regression failed.
"""

from __future__ import annotations

from dataclasses import asdict, dataclass, field

from specd.pilot.stats import mean, paired_diff

BURST_P99_TOLERANCE = 0.05

RULE = __doc__.split("The rule (written into every report, RULE below): ", 1)[1].strip()


def decode_cost_per_token(round_s: float, tokens_per_round: float) -> float:
    """Seconds of decode time per committed token."""
    if tokens_per_round <= 0:
        raise ValueError("tokens_per_round must be > 0")
    return round_s / tokens_per_round


def end_to_end_speedup(total_s: float, decode_s: float, decode_speedup: float) -> float:
    """Whole-task speed-up when only the decode part gets ``decode_speedup`` faster."""
    if not 0 <= decode_s <= total_s or decode_speedup <= 0:
        raise ValueError("need 0 <= decode_s <= total_s and decode_speedup > 0")
    return total_s / (total_s - decode_s + decode_s / decode_speedup)


@dataclass
class Arm:
    """One group at one trace (one task group), a value per repeat."""

    goodput: list[float]
    e2e_p50: list[float]
    e2e_p99: list[float]


@dataclass
class TraceCompare:
    trace: str
    baseline: str
    goodput_diff: tuple[float, float, float] | None  # G1 - baseline: mean, lo, hi
    latency_gain: tuple[float, float, float] | None  # baseline p50 - G1 p50 (s)
    relative_latency_gain: float | None
    p99_ratio: float | None  # G1 p99 / baseline p99
    goodput_gain: bool = False
    goodput_loss: bool = False
    latency_gain_clear: bool = False
    better: bool = False


@dataclass
class Verdict:
    decision: str  # adopt | low-load only | reject
    reasons: list[str] = field(default_factory=list)
    crossover_load: float | None = None  # fraction of G0 capacity
    crossover_rps: float | None = None
    traces: dict[str, TraceCompare] = field(default_factory=dict)

    def to_json(self) -> dict:
        return asdict(self)


def _better_baseline(arms: dict[str, Arm]) -> str:
    def key(g: str) -> tuple[float, float]:
        return (mean(arms[g].goodput) or 0.0, -(mean(arms[g].e2e_p50) or float("inf")))
    return max(("G0", "G2"), key=key)


def compare(trace: str, arms: dict[str, Arm]) -> TraceCompare:
    base = _better_baseline(arms)
    g1, b = arms["G1"], arms[base]
    gd = paired_diff(g1.goodput, b.goodput)
    lg = paired_diff(b.e2e_p50, g1.e2e_p50)
    b50 = mean(b.e2e_p50)
    p99 = (mean(g1.e2e_p99) or 0) / m if (m := mean(b.e2e_p99)) else None
    c = TraceCompare(trace, base, gd, lg, (lg[0] / b50) if lg and b50 else None, p99)
    c.goodput_gain = gd is not None and gd[1] > 0
    c.goodput_loss = gd is not None and gd[2] < 0
    c.latency_gain_clear = lg is not None and lg[1] > 0
    c.better = c.goodput_gain or (not c.goodput_loss and c.latency_gain_clear)
    return c


def _fmt(d: tuple[float, float, float] | None, unit: str) -> str:
    if d is None:
        return "n/a"
    return f"{d[0]:+.3g} {unit} (95% CI {d[1]:+.3g}..{d[2]:+.3g})"


def decide(flat: dict[str, Arm], peak: dict[str, Arm], burst: dict[str, Arm] | None,
           load_flat: float, load_peak: float, g0_capacity_rps: float | None,
           regression_ok: bool, regression_note: str = "") -> Verdict:
    """The rule above on one task group's figures (``*``: group name -> Arm)."""
    f, p = compare("flat", flat), compare("peak", peak)
    traces = {"flat": f, "peak": p}
    burst_ok = True
    if burst is not None:
        bc = compare("burst", burst)
        traces["burst"] = bc
        burst_ok = not bc.goodput_loss and (bc.p99_ratio is None
                                            or bc.p99_ratio <= 1 + BURST_P99_TOLERANCE)
    reasons = []
    for c in traces.values():
        reasons.append(f"{c.trace}: vs {c.baseline}: goodput {_fmt(c.goodput_diff, 'req/s')}; "
                       f"median e2e gain {_fmt(c.latency_gain, 's')}"
                       + (f"; p99 ratio {c.p99_ratio:.2f}" if c.p99_ratio else "")
                       + f" -> {'better' if c.better else 'not better'}")
    if burst is not None:
        reasons.append(f"burst not worse: {'yes' if burst_ok else 'no'}")
    if not regression_ok:
        reasons.append(f"business regression failed: {regression_note or 'see regression'}")
        return Verdict("reject", reasons, traces=traces)
    if f.better and p.better and burst_ok:
        return Verdict("adopt", reasons, traces=traces)
    if f.better:
        rf, rp = f.relative_latency_gain or 0.0, p.relative_latency_gain or 0.0
        load = load_flat + (load_peak - load_flat) * rf / (rf - rp) if rf > 0 >= rp else load_flat
        rps = load * g0_capacity_rps if g0_capacity_rps else None
        reasons.append(f"crossover at {load:.2f}x G0 capacity"
                       + (f" ({rps:.3g} req/s)" if rps else ""))
        return Verdict("low-load only", reasons, load, rps, traces)
    return Verdict("reject", reasons, traces=traces)
