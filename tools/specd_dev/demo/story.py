"""The demo's story as data: the service at each stage, and the status changes told in words.

Pure: no I/O, no clock. ``specd_dev.demo.__main__`` applies these and narrates with
:func:`tell`; the unit tests check both without a cluster.

Stages (issue 25):

1. the chart installed (operator and dashboard as pods), the dashboard URL printed;
2. Scheme A: parallel draft heads, fixed-length verification, under mixed-task traffic;
3. the migration to Scheme B (semi-autoregressive drafter, confidence-scheduled
   verification) as a canary, judged per task group, promoted;
4. a bad revision (another build of the target, whose greedy outputs differ: a broken
   quantisation, say), failed by the lossless probes and rolled back on its own;
5. the tuner on, with one task group sampled hot (its drafts are mostly rejected): the
   tuner's decision for that group, with its evidence;
6. a summary from Prometheus: A and B side by side.
"""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

SERVICE = "chat"
NAMESPACE = "demo"
BAD_GROUP = "code"  # sampled at BAD_TEMPERATURE in stage 5
BAD_TEMPERATURE = 1.5
TUNING_INTERVAL_S = 30
# stage 5 has one worker left: twice the arrivals (per group 0.4/s, a dozen requests an
# interval), and a window judged on 8 of a group's requests (the default 20 is for a service
# with real traffic; fewer in an interval is a hold, never a decision)
TUNING_RATE = 0.8
TUNING_MIN_REQUESTS = 8

Obj = Mapping[str, Any]

# one worker per track, one CPU each: stable and canary side by side on a 2-core machine
WORKER = {"image": "specd-worker:dev",
          "resources": {"limits": {"cpu": "1", "memory": "3Gi", "nvidia.com/gpu": 1}}}
# a minute a measurement: at the demo's rate each task group has a few requests per track
# in it (fewer than minSamples is Inconclusive, never a pass)
ANALYSIS = {
    "interval": "60s", "minSamples": 3, "failureLimit": 1, "inconclusiveLimit": 100,
    "probes": {"maxTokens": 16},
    "metrics": [
        # per task group: B must not make any group much slower than A
        {"name": "speed", "metric": "tokensPerSecond", "comparison": "relativeToStable",
         "min": 0.6, "byTaskGroup": True},
        # a guard against a gross regression only: a p95 over the dozen requests a track
        # finishes in a minute here moves by 1.7x between windows of one unchanged service
        {"name": "tpot", "metric": "timePerOutputTokenP95", "comparison": "relativeToStable",
         "max": 2.0},
        {"name": "errors", "metric": "errorRate", "comparison": "absolute", "max": 0.0},
    ],
}


def scheme_a() -> dict[str, Any]:
    """The starting service: Scheme A, canary rollouts with analysis."""
    return {
        "replicas": 1,
        "model": {"reference": "smollm2-135m", "maxContext": 512},
        "drafter": {"method": "parallel", "k": 3},
        "verification": {"mode": "fixed", "fixedLength": 3},
        "engine": {"maxBatch": 4, "queueBound": 32},
        "worker": WORKER,
        "rollout": {"strategy": "Canary", "steps": [{"weight": 50, "pause": {"duration": "30s"}}],
                    "analysis": ANALYSIS},
    }


def to_scheme_b() -> dict[str, Any]:
    """The migration, as a merge patch: new drafter (new pods), scheduled verification."""
    return {"spec": {"drafter": {"method": "semi-ar", "k": 3},
                     "verification": {"mode": "scheduled", "fixedLength": None,
                                      "maxVerify": 3}}}


def bad_revision(model_dir: str) -> dict[str, Any]:
    """A revision serving another build of the target under the same model name (its greedy
    outputs differ from the stable's), with prompt-lookup drafting: a trained drafter is
    bound to the target it was trained on and refuses another."""
    return {"spec": {"model": {"reference": model_dir, "maxContext": 512},
                     "drafter": {"method": "ngram", "k": 3},
                     "verification": {"mode": "fixed", "fixedLength": 3, "maxVerify": None},
                     "engine": {"extraArgs": ["--served-model-name=smollm2-135m"]}}}


def back_to_scheme_b() -> dict[str, Any]:
    """The spec the stable track serves again, after the bad revision's rollback."""
    spec = scheme_a()
    return {"spec": {"model": spec["model"], **to_scheme_b()["spec"],
                     "engine": {"extraArgs": None}}}


def tuning_on() -> dict[str, Any]:
    """The tuner on; it may move each group between scheduled and plain."""
    return {"spec": {"tuning": {"enabled": True, "interval": f"{TUNING_INTERVAL_S}s",
                                "referenceShare": 0.2, "minRequests": TUNING_MIN_REQUESTS,
                                "bounds": {"modes": ["scheduled", "plain"]}}}}


# ---- telling what changed -------------------------------------------------------------------

def _rollout(status: Obj) -> Obj:
    return status.get("rollout") or {}


def _analysis_key(result: Obj) -> tuple[str, str]:
    return (str(result.get("name") or result.get("metric")), str(result.get("taskGroup") or ""))


def tell(before: Obj | None, after: Obj) -> list[str]:
    """Lines for what changed between two observations of a service's status: its phase,
    the rollout's phase, step and weight, each new analysis verdict, each tuner decision."""
    before = before or {}
    lines: list[str] = []
    if after.get("phase") != before.get("phase"):
        lines.append(f"service {after.get('phase', 'Pending')}")
    old, new = _rollout(before), _rollout(after)
    if (new.get("phase"), new.get("step"), after.get("canaryWeight")) != (
            old.get("phase"), old.get("step"), before.get("canaryWeight")) and new:
        weight = after.get("canaryWeight")
        at = f", canary weight {weight}%" if weight else ""
        lines.append(f"rollout {new.get('phase', '-')}{at}: {new.get('message') or ''}".rstrip(": "))
    if analysis_run(before, after):
        lines.append("  analysis: " + "; ".join(_verdict(a) for a in after.get("analysis") or []))
    old_groups = ((before.get("tuning") or {}).get("groups") or {})
    for group, entry in sorted(((after.get("tuning") or {}).get("groups") or {}).items()):
        was = old_groups.get(group) or {}
        if entry.get("lastChange") and entry.get("lastChange") != was.get("lastChange"):
            lines.append(f"  tuner: {group} -> {entry.get('mode')} ({entry.get('action')}): "
                         f"{entry.get('reason')}")
    return lines


def analysis_run(before: Obj, after: Obj) -> bool:
    """A new measurement came in (some result's message changed)."""
    def messages(status: Obj) -> dict[tuple[str, str], Any]:
        return {_analysis_key(a): (a.get("verdict"), a.get("message"))
                for a in status.get("analysis") or []}
    return bool(after.get("analysis")) and messages(before) != messages(after)


def _verdict(result: Obj) -> str:
    name, group = _analysis_key(result)
    label = f"{name}[{group}]" if group else name
    verdict = str(result.get("verdict"))
    value = result.get("value")
    if verdict in ("Successful", "Failed") and isinstance(value, int | float) and \
            result.get("metric") != "losslessProbe":
        return f"{label} {verdict} ({value:.2f})"
    if verdict == "Inconclusive":
        return f"{label} Inconclusive (too few requests)" if "too few" in str(
            result.get("message")) else f"{label} Inconclusive"
    return f"{label} {verdict}"


def measured_canary(status: Obj) -> bool:
    """A canary takes traffic and its analysis has measured it."""
    return bool(status.get("canaryWeight")) and any(
        a.get("verdict") in ("Successful", "Failed") and a.get("metric") != "losslessProbe"
        for a in status.get("analysis") or [])


def rollout_ended(status: Obj, stable_before: str | None) -> bool:
    """The rollout is over: rolled back, or promoted (the stable revision moved on and no
    canary is left)."""
    phase = _rollout(status).get("phase")
    return phase == "RolledBack" or (phase == "Healthy" and not status.get("canaryRevision")
                                     and status.get("stableRevision") != stable_before)


def rolled_back_reason(status: Obj) -> str | None:
    """The rollback in words, once the rollout is RolledBack."""
    rollout = _rollout(status)
    if rollout.get("phase") != "RolledBack":
        return None
    return str(rollout.get("message") or "rolled back")


# a hold with one of these reasons was not judged on the group's data
UNJUDGED = ("too few requests", "no data", "no goodput")


class TunerWatch:
    """Stage 5's end, fed every observed status: the tuner changed ``group``'s policy, or
    judged the group on its data ``intervals`` intervals in a row and held it (where the hot
    group's speculation does not lose to true plain on this machine, holding is the verdict)."""

    def __init__(self, group: str, intervals: int = 3) -> None:
        self.group, self.intervals = group, intervals
        self.last_run: str | None = None
        self.judged = 0
        self.entry: Obj = {}

    def __call__(self, status: Obj) -> bool:
        tuning = status.get("tuning") or {}
        entry = (tuning.get("groups") or {}).get(self.group) or {}
        if entry.get("lastChange"):
            self.entry = entry
            return True
        run = tuning.get("lastRun")
        if run and run != self.last_run:
            self.last_run = run
            on_data = bool(entry) and not str(entry.get("reason", "")).startswith(UNJUDGED)
            self.judged = self.judged + 1 if on_data else 0
        if self.judged >= self.intervals:
            self.entry = entry
            return True
        return False

    @property
    def changed(self) -> bool:
        return bool(self.entry.get("lastChange"))


def evidence_summary(evidence: Obj) -> str:
    """A tuner decision's evidence in one line: its figures rounded, its bookkeeping left
    out."""
    def short(value: Any) -> Any:
        if isinstance(value, float):
            return round(value, 3)
        if isinstance(value, list):
            return [short(v) for v in value]
        return value
    return ", ".join(f"{key} {short(value)}" for key, value in evidence.items()
                     if key not in ("state", "decision"))
