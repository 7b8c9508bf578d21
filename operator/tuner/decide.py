"""The policy tuner's decision for one (service, task group), pure.

    decision = decide(window, policy, state, bounds, now, settings)

Each interval the operator reads one Prometheus window per task group (``Window``: what the
group's requests did under its current policy, and what true-plain decoding measured on the
same workers did at a similar batch size) and asks what the group's verification policy should
be. A change is rare and deliberate:

- **Goodput, not acceptance.** Speculation is judged by committed tokens per second of round
  time against the measured true-plain reference (``plain_goodput``), never by acceptance alone
  (acceptance can stay high while the gain turns negative).
- **Evidence over consecutive windows, asymmetric.** A recommendation becomes a change only when
  the last ``shrink_windows`` windows (backing off: fewer drafts, or plain) or the last
  ``grow_windows`` windows (speculating more) all recommend it; a window with too few samples,
  or none, recommends nothing and breaks the streak. Separate thresholds to shrink and to grow
  (a dead band between them) keep a value near one threshold from flipping the policy.
- **Stabilisation.** Among the recommendations in the streak the most conservative one is
  taken (the smallest growth, the smallest back-off), one step at a time.
- **Dwell.** No change within ``dwell_s`` of the last one.
- **Plain is never a latch.** A group sent to plain is re-probed after a back-off that doubles
  each time speculation loses again (up to ``max_backoff_s``).
- **Bounds** (``spec.tuning.bounds``) are never crossed; a pinned group or a progressing canary
  holds, and every hold says why.

The knobs it moves: the mode (plain vs the group's speculative mode) and the draft length (K,
or the fixed length in fixed mode; max verify in scheduled mode follows K). Calibration is a
separate decision (``recalibrate``), taken only in an interval that changes nothing else.
"""

from __future__ import annotations

import math
from dataclasses import dataclass, field, replace
from typing import Literal

from specd.api.policy import Calibration

Action = Literal["hold", "plain", "speculate", "shrink", "grow", "recalibrate"]


@dataclass(frozen=True)
class Window:
    """One task group's measurements over one window (Prometheus, the stable track)."""

    end: float  # epoch seconds
    requests: float  # finished in the window
    goodput: float | None  # committed tokens / s of round time under the current policy
    plain_goodput: float | None = None  # measured true-plain reference, similar batch size
    plain_samples: float = 0.0  # rounds behind the plain reference
    # conditional acceptance of draft position i+1 given it was verified (drafts beyond the
    # current length have no entry)
    acceptance_by_position: tuple[float, ...] = ()
    verified_by_position: tuple[float, ...] = ()
    # where position i+1 was reached (verified, every earlier draft accepted): how often, and
    # the scheduler's mean predicted confidence there (calibration against acceptance)
    reached_by_position: tuple[float, ...] = ()
    predicted_by_position: tuple[float, ...] = ()


@dataclass(frozen=True)
class GroupPolicy:
    """What the tuner controls for one group."""

    mode: Literal["plain", "fixed", "scheduled"]
    k: int  # drafted tokens per round (fixed mode: the verify length too)
    speculative_mode: Literal["fixed", "scheduled"] = "scheduled"  # what plain returns to


@dataclass(frozen=True)
class Bounds:
    modes: tuple[str, ...] = ("plain", "fixed", "scheduled")
    k_min: int = 1
    k_max: int = 8


@dataclass(frozen=True)
class Settings:
    min_requests: float = 20.0  # a window with fewer recommends nothing
    min_plain_samples: float = 50.0  # a plain reference on fewer rounds is not read
    min_verified: float = 50.0  # a position verified fewer times is not judged
    plain_margin: float = 0.03  # speculation must beat plain by this share to stay
    speculate_margin: float = 0.10  # ... and by this share to be taken up again
    shrink_below: float = 0.25  # the last position's acceptance below this: drop it
    grow_above: float = 0.60  # above this (every position): add one
    rarely_verified: float = 0.05  # the last position verified this rarely: drop it
    shrink_windows: int = 2  # consecutive windows to back off (quicker)
    grow_windows: int = 3  # consecutive windows to speculate more (slower)
    dwell_s: float = 600.0  # no change within this of the last one
    backoff_s: float = 900.0  # first re-probe of speculation after going plain
    max_backoff_s: float = 4 * 3600.0
    calibration_error: float = 0.05  # recalibrate above this expected calibration error
    max_bias: float = 4.0  # |per-position bias| stays within this (logit units)

    @classmethod
    def for_interval(cls, interval_s: float, min_requests: float = 20.0) -> Settings:
        """Time constants in units of the service's tuning interval (the knob a user sets):
        a dwell of 2 intervals, a first plain back-off of 3, at most 48; and the requests a
        window needs (``spec.tuning.minRequests``)."""
        return cls(min_requests=min_requests, dwell_s=2 * interval_s,
                   backoff_s=3 * interval_s, max_backoff_s=48 * interval_s)


@dataclass(frozen=True)
class State:
    """What the tuner keeps per group between intervals (in ``status.tuning``)."""

    last_change: float | None = None
    backoff_s: float | None = None  # the current plain back-off (None: never went plain)
    plain_since: float | None = None
    recent: tuple[Action, ...] = ()  # the raw recommendation of each recent window
    recent_k: tuple[int, ...] = ()  # the length each recommended (for stabilisation)


@dataclass(frozen=True)
class Decision:
    action: Action
    policy: GroupPolicy
    state: State
    reason: str
    evidence: dict = field(default_factory=dict)

    @property
    def changed(self) -> bool:
        return self.action != "hold"


def recommend(window: Window | None, policy: GroupPolicy, bounds: Bounds,
              s: Settings) -> tuple[Action, int, str]:
    """What this window alone says: (action, the draft length it wants, why)."""
    if window is None:
        return "hold", policy.k, "no data in the window"
    if window.requests < s.min_requests:
        return "hold", policy.k, (f"too few requests ({window.requests:.0f} < "
                                  f"{s.min_requests:.0f})")
    if policy.mode == "plain":
        return "hold", policy.k, "plain: waiting for the next re-probe"
    if window.goodput is None:
        return "hold", policy.k, "no goodput measured"
    if window.plain_goodput is not None and window.plain_samples >= s.min_plain_samples:
        gain = window.goodput / window.plain_goodput - 1 if window.plain_goodput > 0 else 0.0
        if gain < -s.plain_margin and "plain" in bounds.modes:
            return "plain", policy.k, (f"goodput {window.goodput:.3g} tok/s is {-gain:.0%} "
                                       f"below true plain {window.plain_goodput:.3g}")
    acc = list(window.acceptance_by_position[:policy.k])
    seen = list(window.verified_by_position[:policy.k])
    if not seen or seen[0] < s.min_verified:
        return "hold", policy.k, "too few verified drafts to judge the positions"
    if len(seen) < policy.k:  # e.g. just grown: the window has not seen it yet
        return "hold", policy.k, f"no measurement of position {policy.k} yet"
    if seen[-1] < s.min_verified:
        rare = seen[-1] / seen[0]
        if rare < s.rarely_verified and policy.k > bounds.k_min:
            return "shrink", policy.k - 1, (f"position {policy.k} is verified in {rare:.0%} "
                                            "of the rounds that verify position 1: drafting "
                                            "it does not pay")
        return "hold", policy.k, f"too few verified drafts at position {policy.k}"
    last = acc[-1]
    if last < s.shrink_below and policy.k > bounds.k_min:
        return "shrink", policy.k - 1, (f"position {policy.k} accepts {last:.2f} < "
                                        f"{s.shrink_below}")
    if min(acc) > s.grow_above and policy.k < bounds.k_max:
        return "grow", policy.k + 1, (f"every position accepts > {s.grow_above} (last "
                                      f"{last:.2f})")
    if last < s.shrink_below:
        return "hold", policy.k, (f"position {policy.k} accepts {last:.2f}, but K is at its "
                                  f"lower bound ({bounds.k_min})")
    if min(acc) > s.grow_above:
        return "hold", policy.k, (f"every position accepts > {s.grow_above}, but K is at its "
                                  f"upper bound ({bounds.k_max})")
    return "hold", policy.k, f"position {policy.k} accepts {last:.2f}: in the dead band"


def decide(window: Window | None, policy: GroupPolicy, state: State, bounds: Bounds,
           now: float, settings: Settings | None = None, *, pinned: bool = False,
           frozen: str | None = None) -> Decision:
    """The group's next policy (or a hold, with the reason)."""
    s = settings or Settings()
    if pinned:
        return Decision("hold", policy, state, "pinned by the user (spec.tuning)")
    if frozen:
        return Decision("hold", policy, state, f"frozen: {frozen}")
    action, k, why = recommend(window, policy, bounds, s)
    keep = max(s.grow_windows, s.shrink_windows)
    state = replace(state, recent=(*state.recent, action)[-keep:],
                    recent_k=(*state.recent_k, k)[-keep:])
    evidence = _evidence(window, action, why)

    def hold(reason: str) -> Decision:
        return Decision("hold", policy, state, reason, evidence)

    if policy.mode == "plain":
        if window is None or window.requests < s.min_requests:
            # a re-probe is a change: it waits for traffic that can judge it
            return hold(f"plain: {why}; the re-probe waits for traffic")
        return _reprobe(policy, state, now, bounds, s, evidence)
    if state.backoff_s is not None and state.last_change is not None \
            and now - state.last_change >= s.max_backoff_s:
        state = replace(state, backoff_s=None)  # speculation held its own: forget the losses
    if state.last_change is not None and now - state.last_change < s.dwell_s:
        return hold(f"dwell: {now - state.last_change:.0f}/{s.dwell_s:.0f}s since the last "
                    f"change ({why})")
    needed = s.grow_windows if action == "grow" else s.shrink_windows
    streak = state.recent[-needed:]
    if action == "hold" or len(streak) < needed or any(a != action for a in streak):
        seen = _streak(state.recent, action) if action != "hold" else 0
        return hold(why if action == "hold" else
                    f"{why}; {min(seen, needed)}/{needed} windows agree so far")
    asked = state.recent_k[-needed:]
    state = replace(state, last_change=now, recent=(), recent_k=())
    if action == "plain":
        backoff = s.backoff_s if state.backoff_s is None else state.backoff_s
        state = replace(state, plain_since=now, backoff_s=backoff)
        return Decision("plain", replace(policy, mode="plain", speculative_mode=policy.mode),
                        state, f"{why}: plain (re-probed in {backoff:.0f}s)", evidence)
    # stabilisation: the most conservative length the streak asked for, one step at most
    if action == "grow":
        target = min(min(asked), policy.k + 1, bounds.k_max)
    else:
        target = max(max(asked), policy.k - 1, bounds.k_min)
    return Decision(action, replace(policy, k=target), state,
                    f"{why}: K {policy.k} -> {target}", evidence)


def _streak(recent: tuple[Action, ...], action: Action) -> int:
    """How many of the latest recommendations, in a row, are ``action``."""
    n = 0
    for a in reversed(recent):
        if a != action:
            break
        n += 1
    return n


def _reprobe(policy: GroupPolicy, state: State, now: float, bounds: Bounds, s: Settings,
             evidence: dict) -> Decision:
    """A plain group goes back to speculating once its back-off has passed (a probe: if it
    loses again it returns to plain, with the back-off doubled)."""
    since = state.plain_since if state.plain_since is not None else now
    backoff = state.backoff_s or s.backoff_s
    if policy.speculative_mode not in bounds.modes:
        return Decision("hold", policy, state, "plain: no speculative mode within bounds",
                        evidence)
    if now - since < backoff:
        return Decision("hold", policy, state,
                        f"plain: re-probing speculation in {backoff - (now - since):.0f}s",
                        evidence)
    state = replace(state, last_change=now, plain_since=None, recent=(), recent_k=(),
                    backoff_s=min(s.max_backoff_s, backoff * 2))
    return Decision("speculate", replace(policy, mode=policy.speculative_mode), state,
                    f"plain for {now - since:.0f}s: re-probing {policy.speculative_mode} "
                    f"(next back-off {state.backoff_s:.0f}s if it loses again)", evidence)


def _evidence(window: Window | None, action: Action, why: str) -> dict:
    if window is None:
        return {"recommendation": action, "why": why}
    return {"recommendation": action, "why": why, "window_end": window.end,
            "requests": window.requests, "goodput": window.goodput,
            "plain_goodput": window.plain_goodput, "plain_samples": window.plain_samples,
            "acceptance_by_position": list(window.acceptance_by_position),
            "verified_by_position": list(window.verified_by_position)}


def _logit(p: float) -> float:
    p = min(max(p, 0.02), 0.98)
    return math.log(p / (1 - p))


def calibration_error(window: Window, s: Settings) -> tuple[float, int] | None:
    """Expected calibration error over the positions reached ``min_verified`` times or
    more: |mean predicted - observed acceptance|, weighted by how often each was reached;
    and how many positions it covers (None: none was reached often enough)."""
    used = [i for i, n in enumerate(window.reached_by_position)
            if n >= s.min_verified and i < len(window.predicted_by_position)
            and i < len(window.acceptance_by_position)]
    if not used:
        return None
    total = sum(window.reached_by_position[i] for i in used)
    ece = sum(window.reached_by_position[i] * abs(window.predicted_by_position[i]
                                                  - window.acceptance_by_position[i])
              for i in used) / total
    return ece, len(used)


def recalibrate(window: Window | None, current: Calibration,
                settings: Settings | None = None) -> tuple[Calibration | None, str, dict]:
    """A per-position bias that moves the predicted confidence onto the observed acceptance
    (in logit space: exact where a position's confidences are alike, a step towards it
    otherwise), or None with the reason. Only above ``calibration_error``, on positions
    reached ``min_verified`` times; later positions keep the last bias (the scheduler
    extends the list)."""
    s = settings or Settings()
    if window is None:
        return None, "no data in the window", {}
    found = calibration_error(window, s)
    if found is None:
        return None, "too few reached positions to check the calibration", {}
    ece, positions = found
    evidence = {"ece": ece, "positions": positions,
                "predicted_by_position": list(window.predicted_by_position),
                "acceptance_by_position": list(window.acceptance_by_position),
                "reached_by_position": list(window.reached_by_position)}
    if ece <= s.calibration_error:
        return None, f"calibrated: ECE {ece:.3f} <= {s.calibration_error}", evidence
    bias = [current.bias[min(i, len(current.bias) - 1)] if current.bias else 0.0
            for i in range(positions)]
    for i in range(positions):
        # the exported prediction is the calibrated one: z = logit(c)/T + b, so moving b
        # by the logit gap moves the prediction onto the acceptance
        shift = (_logit(window.acceptance_by_position[i])
                 - _logit(window.predicted_by_position[i]))
        bias[i] = max(-s.max_bias, min(s.max_bias, bias[i] + shift))
    new = Calibration(temperature=list(current.temperature), bias=[round(b, 4) for b in bias])
    return new, (f"ECE {ece:.3f} > {s.calibration_error} over {positions} positions: "
                 f"per-position bias {new.bias}"), evidence
