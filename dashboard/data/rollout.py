"""The rollout page's content from a SpeculativeService object (pure): its steps with the
current one, set vs actual weight, every analysis result with its threshold and PromQL, and
the rollback reason in words."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

Obj = Mapping[str, Any]


@dataclass(frozen=True)
class Step:
    index: int  # 1-based, as people count
    weight: int
    pause: str  # "until promoted", "5m", or "-"
    state: str  # "done", "current", "next"


@dataclass(frozen=True)
class Summary:
    phase: str
    stable: str | None
    canary: str | None
    set_weight: int
    actual_weight: int
    step: str
    pause_reason: str | None
    message: str
    rolled_back: str | None  # why, in words; None unless rolled back


def steps(obj: Obj) -> list[Step]:
    spec_steps = list(((obj.get("spec") or {}).get("rollout") or {}).get("steps") or [])
    status = obj.get("status") or {}
    current = int((status.get("rollout") or {}).get("step", 0))
    running = bool(status.get("canaryRevision"))
    out = []
    for i, step in enumerate(spec_steps):
        pause = step.get("pause")
        label = "-" if pause is None else (pause.get("duration") or "until promoted")
        state = ("done" if i < current else "current" if i == current else "next") \
            if running else "next"
        out.append(Step(i + 1, int(step.get("weight", 0)), label, state))
    return out


def summary(obj: Obj) -> Summary:
    status = obj.get("status") or {}
    rollout = status.get("rollout") or {}
    spec_steps = ((obj.get("spec") or {}).get("rollout") or {}).get("steps") or []
    canary = status.get("canaryRevision")
    phase = rollout.get("phase", "Healthy")
    step = (f"{min(int(rollout.get('step', 0)) + 1, len(spec_steps))}/{len(spec_steps)}"
            if canary and spec_steps else "-")
    return Summary(
        phase=phase, stable=status.get("stableRevision"), canary=canary,
        set_weight=int(rollout.get("setWeight", 0)), actual_weight=int(
            status.get("canaryWeight", 0)), step=step,
        pause_reason=rollout.get("pauseReason") if phase == "Paused" else None,
        message=rollout.get("message") or "",
        rolled_back=(rollout.get("message") or "rolled back (no reason recorded)")
        if phase == "RolledBack" else None)


def thresholds(obj: Obj) -> dict[str, str]:
    """Each analysis metric's threshold in words, by its name."""
    analysis = ((obj.get("spec") or {}).get("rollout") or {}).get("analysis") or {}
    out = {}
    for metric in analysis.get("metrics") or []:
        bounds = []
        relative = metric.get("comparison", "relativeToStable") == "relativeToStable"
        unit = "x stable" if relative else ""
        if metric.get("min") is not None:
            bounds.append(f">= {metric['min']:g}{' ' + unit if unit else ''}")
        if metric.get("max") is not None:
            bounds.append(f"<= {metric['max']:g}{' ' + unit if unit else ''}")
        out[metric["name"]] = " and ".join(bounds) or "-"
    return out


def analysis_rows(obj: Obj) -> list[dict[str, Any]]:
    """``status.analysis`` as table rows, a missing value shown as "no data"."""
    limits = thresholds(obj)

    def num(v: float | None) -> str:
        return "no data" if v is None else f"{v:.4g}"

    return [{"metric": r.get("name") or r.get("metric"), "task group": r.get("taskGroup") or
             "all", "canary": num(r.get("canary")), "stable": num(r.get("stable")),
             "value": num(r.get("value")), "threshold": limits.get(r.get("name", ""), "-"),
             "verdict": r.get("verdict", "?"), "message": r.get("message") or "",
             "PromQL": r.get("query") or "", "at": r.get("at") or ""}
            for r in (obj.get("status") or {}).get("analysis") or []]
