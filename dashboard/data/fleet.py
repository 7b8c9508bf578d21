"""The fleet page's rows: one per SpeculativeService, from its object (spec and status) and
the live figures of ``fleet_queries`` (pure).

"Needs attention" is a list of reasons in words, empty when the service needs none:
Degraded; a rollout rolled back; paused for a reason other than a step's own pause (the
operator paused it, or a user did); an inconclusive or failed analysis result; the tuner
holding a task group on plain decoding (a fallback: speculation lost there).
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from specd.dashboard.data.fleet_queries import FLEET_FIGURES, Key

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class FleetRow:
    namespace: str
    name: str
    phase: str
    ready: str
    mode: str
    k: int | None
    stable: str | None
    canary: str | None
    step: str  # "i/N" while a canary runs, else "-"
    set_weight: int | None  # None: no canary
    actual_weight: int | None
    rollout: str  # the rollout's phase
    tuner: str  # "off", "on", "dry run", with the groups on plain
    attention: tuple[str, ...] = ()
    # live figures over the window; None is "no data" (never 0)
    figures: Mapping[str, float | None] = field(default_factory=dict)

    @property
    def key(self) -> Key:
        return (self.namespace, self.name)


def _status(obj: Obj) -> Mapping[str, Any]:
    return obj.get("status") or {}


def _spec(obj: Obj) -> Mapping[str, Any]:
    return obj.get("spec") or {}


def mode_of(obj: Obj) -> str:
    """The verification mode the service runs (as rendered in status.policy, else the spec's,
    else what the drafter implies, as ``ServiceSpec.effective_mode`` does)."""
    policy = _status(obj).get("policy") or {}
    if policy.get("mode"):
        return str(policy["mode"])
    spec = _spec(obj)
    mode = (spec.get("verification") or {}).get("mode")
    if mode:
        return str(mode)
    method = (spec.get("drafter") or {}).get("method", "none")
    return "plain" if method == "none" else "scheduled" if method == "semi-ar" else "fixed"


def plain_groups(obj: Obj) -> list[str]:
    """Task groups the tuner holds on plain decoding."""
    tuning = _status(obj).get("tuning") or {}
    return sorted(g for g, entry in (tuning.get("overlay") or {}).items()
                  if (entry or {}).get("mode") == "plain")


def tuner_label(obj: Obj) -> str:
    tuning = _spec(obj).get("tuning") or {}
    if not tuning.get("enabled"):
        return "off"
    label = "dry run" if tuning.get("dryRun") else "on"
    fallback = plain_groups(obj)
    return f"{label}; plain: {', '.join(fallback)}" if fallback else label


def attention(obj: Obj) -> list[str]:
    """Why the service needs a look, in words (empty: it does not)."""
    status = _status(obj)
    rollout = status.get("rollout") or {}
    reasons = []
    if status.get("phase") == "Degraded":
        degraded: Mapping[str, Any] = next((c for c in status.get("conditions") or []
                         if c.get("type") == "Degraded" and c.get("status") == "True"), {})
        reasons.append(f"Degraded: {degraded.get('message') or degraded.get('reason') or '?'}")
    if rollout.get("phase") == "RolledBack":
        reasons.append(f"rolled back: {rollout.get('message') or 'see the rollout'}")
    if rollout.get("phase") == "Paused" and rollout.get("pauseReason") not in (None,
                                                                                "StepPause"):
        reasons.append(f"paused: {rollout['pauseReason']}")
    for result in status.get("analysis") or []:
        if result.get("verdict") in ("Inconclusive", "Failed", "Error"):
            group = f" ({result['taskGroup']})" if result.get("taskGroup") else ""
            reasons.append(f"analysis {result['verdict'].lower()}: "
                           f"{result.get('name') or result.get('metric')}{group}")
    fallback = plain_groups(obj)
    if fallback:
        reasons.append(f"tuner fallback to plain: {', '.join(fallback)}")
    return reasons


def _step(obj: Obj) -> str:
    steps = list((_spec(obj).get("rollout") or {}).get("steps") or [])
    status = _status(obj)
    if not steps or not status.get("canaryRevision"):
        return "-"
    step = int((status.get("rollout") or {}).get("step", 0))
    return f"{min(step + 1, len(steps))}/{len(steps)}"


def fleet_row(obj: Obj, figures: Mapping[str, float | None] | None = None) -> FleetRow:
    meta, status = obj["metadata"], _status(obj)
    rollout = status.get("rollout") or {}
    canary = status.get("canaryRevision")
    k = (_spec(obj).get("drafter") or {}).get("k")
    return FleetRow(
        namespace=meta["namespace"], name=meta["name"],
        phase=status.get("phase", "Pending"), ready=status.get("ready", "-"),
        mode=mode_of(obj), k=int(k) if k is not None and mode_of(obj) != "plain" else None,
        stable=status.get("stableRevision"), canary=canary, step=_step(obj),
        set_weight=int(rollout.get("setWeight", 0)) if canary else None,
        actual_weight=int(status.get("canaryWeight", 0)) if canary else None,
        rollout=rollout.get("phase", "-"), tuner=tuner_label(obj),
        attention=tuple(attention(obj)),
        figures={f: (figures or {}).get(f) for f in FLEET_FIGURES})


def fleet(objects: Iterable[Obj], live: Mapping[str, Mapping[Key, float]]) -> list[FleetRow]:
    """Every service's row, sorted by namespace and name; ``live``: figure -> the values
    ``fleet_queries.by_service`` read (a service missing there has no data for it)."""
    rows = []
    for obj in objects:
        key = (obj["metadata"]["namespace"], obj["metadata"]["name"])
        rows.append(fleet_row(obj, {f: (live.get(f) or {}).get(key) for f in FLEET_FIGURES}))
    return sorted(rows, key=lambda r: r.key)


def select(rows: Sequence[FleetRow], *, attention_only: bool = False,
           namespace: str | None = None, text: str = "") -> list[FleetRow]:
    """The rows the page's filters keep (the filters live in the URL's query string)."""
    out = []
    for row in rows:
        if attention_only and not row.attention:
            continue
        if namespace and row.namespace != namespace:
            continue
        if text and text.lower() not in f"{row.namespace}/{row.name}".lower():
            continue
        out.append(row)
    return out
